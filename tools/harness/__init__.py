"""Run the real program in-process under the Pulumi SDK's mocks and look at what the engine got.

Shared by the tests and the tools (which run without the test suite):

- `stacks`: stack files, engine config, `run_program(stack, config=...)` -> `Graph`
- `graph`: the recorded resources (`Resource`, `Secret`) and questions about their order
- `mocks`: plausible provider answers (instances, subnets, command stdout, AMI look-ups)
- `recorder`: the one module on private SDK internals (the recording monitor, the program run,
  the engine's URNs)
- `identity`: which old URN each registered resource takes over (the engine's alias rules)
"""
