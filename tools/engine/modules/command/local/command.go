// Package local is the stand-in's command:local:Command (pulumi-command v1.2.1,
// provider/pkg/provider/local): a command run on the machine running the engine.
package local

import (
	"context"

	"github.com/pulumi/pulumi-go-provider/infer"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"gpu-cluster/tools/engine/command/shared"
)

// Command is command:local:Command.
type Command struct{}

// Logging is command:local:Logging: which of the output streams go to the engine's log.
type Logging string

func (Logging) Values() []infer.EnumValue[Logging] {
	return []infer.EnumValue[Logging]{
		{Name: "stdout", Value: "stdout"},
		{Name: "stderr", Value: "stderr"},
		{Name: "stdoutAndStderr", Value: "stdoutAndStderr"},
		{Name: "none", Value: "none"},
	}
}

// logs tells whether stream ("stdout" or "stderr") is logged; unset logs both (local/logging.go).
func (l *Logging) logs(stream string) bool {
	return l == nil || string(*l) == stream || *l == "stdoutAndStderr"
}

// Options are the inputs besides the lifecycle (local/base.go, BaseInputs). assetPaths and
// archivePaths are accepted for the schema's sake and refused when set: the program uses neither.
type Options struct {
	Stdin                  *string            `pulumi:"stdin,optional"`
	Logging                *Logging           `pulumi:"logging,optional"`
	Interpreter            *[]string          `pulumi:"interpreter,optional"`
	Dir                    *string            `pulumi:"dir,optional"`
	Environment            *map[string]string `pulumi:"environment,optional"`
	AssetPaths             *[]string          `pulumi:"assetPaths,optional"`
	ArchivePaths           *[]string          `pulumi:"archivePaths,optional"`
	AddPreviousOutputInEnv *bool              `pulumi:"addPreviousOutputInEnv,optional"`
}

// Inputs of command:local:Command.
type Inputs struct {
	shared.Lifecycle
	Options
}

// Output is what a run leaves in the state besides the inputs (local/base.go, BaseOutputs).
type Output struct {
	Stdout string `pulumi:"stdout"`
	Stderr string `pulumi:"stderr"`
}

// State of command:local:Command: its inputs and its last run's output.
type State struct {
	Inputs
	Output
}

// Create runs `create` (nothing in a preview or when unset) under a new random id
// (local/commandController.go, Create: resource.NewUniqueHex(name, 8, 0)). The framework drops
// the response of a failed Create, so the engine records nothing (pulumi-go-provider
// infer/resource.go, derivedResourceController.Create).
func (*Command) Create(ctx context.Context, req infer.CreateRequest[Inputs]) (
	infer.CreateResponse[State], error,
) {
	state := State{Inputs: req.Inputs}
	id, err := resource.NewUniqueHex(req.Name, 8, 0)
	if err != nil || req.DryRun || req.Inputs.Create == nil {
		return infer.CreateResponse[State]{ID: id, Output: state}, err
	}
	err = run(ctx, *req.Inputs.Create, req.Inputs.Options, &state.Output)
	return infer.CreateResponse[State]{ID: id, Output: state}, err
}

// Update runs `update`, else `create`, with the previous output in the environment
// (local/commandController.go, Update).
func (*Command) Update(ctx context.Context, req infer.UpdateRequest[Inputs, State]) (
	infer.UpdateResponse[State], error,
) {
	state := State{Inputs: req.Inputs, Output: req.State.Output}
	command := req.Inputs.UpdateCommand()
	if req.DryRun || command == nil {
		return infer.UpdateResponse[State]{Output: state}, nil
	}
	err := run(ctx, *command, req.Inputs.Options, &state.Output)
	return infer.UpdateResponse[State]{Output: state}, err
}

// Delete runs the stored `delete` with the stored options (local/commandController.go,
// Delete: it reads req.State, never the program's current inputs).
func (*Command) Delete(ctx context.Context, req infer.DeleteRequest[State]) (
	infer.DeleteResponse, error,
) {
	stored := req.State
	if stored.Delete == nil {
		return infer.DeleteResponse{}, nil
	}
	return infer.DeleteResponse{}, run(ctx, *stored.Delete, stored.Options, &stored.Output)
}
