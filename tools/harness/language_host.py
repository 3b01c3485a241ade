"""A Python language host for the real-engine harness: serves one program to `pulumi ... --client`.

    python -m tools.harness.language_host PROGRAM_DIR    # prints the port, serves until stopped

pulumi-language-python cannot be built here, so the harness takes the Automation API's route for
inline programs: the SDK's own `LanguageServer` (pulumi/automation/_server.py) serves the
LanguageRuntime service and the CLI connects with `--client`. The program is the project's real
`__main__.py`, run by `runpy` as `__main__` (as pulumi-language-python-exec does) in the CLI's
project directory, so relative asset paths mean the same to program, engine and providers;
config and secrets come in the Run request. Sources and limits:
docs/decisions/055-the-real-engine-built-from-its-modules.md.
"""

from __future__ import annotations

import runpy
import signal
import sys
import threading
from concurrent import futures
from pathlib import Path

import grpc
from pulumi.automation._server import LanguageServer
from pulumi.runtime._grpc_settings import _GRPC_CHANNEL_OPTIONS
from pulumi.runtime.proto import language_pb2_grpc


def program_of(directory: Path):
    main = directory / "__main__.py"

    def run() -> None:
        if str(directory) not in sys.path:
            sys.path.insert(0, str(directory))
        runpy.run_path(str(main), run_name="__main__")

    return run


def serve(directory: Path) -> None:
    # The same server options the Automation API uses for an inline program (_stack.py, up).
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=_GRPC_CHANNEL_OPTIONS)
    language_pb2_grpc.add_LanguageRuntimeServicer_to_server(
        LanguageServer(program_of(directory)), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    stopped.wait()
    server.stop(0)


if __name__ == "__main__":
    serve(Path(sys.argv[1]).resolve())
