package remote

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi-go-provider/infer"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"gpu-cluster/tools/engine/command/shared"
)

// Command is command:remote:Command.
type Command struct{}

// Logging is command:remote:Logging (remote/logging.go).
type Logging string

func (Logging) Values() []infer.EnumValue[Logging] {
	return []infer.EnumValue[Logging]{
		{Name: "stdout", Value: "stdout"},
		{Name: "stderr", Value: "stderr"},
		{Name: "stdoutAndStderr", Value: "stdoutAndStderr"},
		{Name: "none", Value: "none"},
	}
}

func (l *Logging) logs(stream string) bool {
	return l == nil || string(*l) == stream || *l == "stdoutAndStderr"
}

// Inputs of command:remote:Command (remote/command.go, CommandInputs). The whole connection
// is secret, so the state never shows its keys in plain text.
type Inputs struct {
	shared.Lifecycle
	Stdin                  *string           `pulumi:"stdin,optional"`
	Logging                *Logging          `pulumi:"logging,optional"`
	Connection             *Connection       `pulumi:"connection"                      provider:"secret"`
	Environment            map[string]string `pulumi:"environment,optional"`
	AddPreviousOutputInEnv *bool             `pulumi:"addPreviousOutputInEnv,optional"`
}

// Output of a run (remote/baseOutputs.go).
type Output struct {
	Stdout string `pulumi:"stdout"`
	Stderr string `pulumi:"stderr"`
}

// State of command:remote:Command: its inputs and its last run's output.
type State struct {
	Inputs
	Output
}

// Create runs `create` over SSH under a new random id; nothing in a preview or when unset
// (remote/commandController.go, Create). A failed run leaves no state (see local.Create).
func (*Command) Create(ctx context.Context, req infer.CreateRequest[Inputs]) (
	infer.CreateResponse[State], error,
) {
	state := State{Inputs: req.Inputs}
	id, err := resource.NewUniqueHex(req.Name, 8, 0)
	if err != nil || req.DryRun || req.Inputs.Create == nil {
		return infer.CreateResponse[State]{ID: id, Output: state}, err
	}
	err = state.run(ctx, *req.Inputs.Create)
	return infer.CreateResponse[State]{ID: id, Output: state}, err
}

// Update runs `update`, else `create`, with the NEW inputs' connection
// (remote/commandController.go, Update).
func (*Command) Update(ctx context.Context, req infer.UpdateRequest[Inputs, State]) (
	infer.UpdateResponse[State], error,
) {
	state := State{Inputs: req.Inputs, Output: req.State.Output}
	command := req.Inputs.UpdateCommand()
	if req.DryRun || command == nil {
		return infer.UpdateResponse[State]{Output: state}, nil
	}
	err := state.run(ctx, *command)
	return infer.UpdateResponse[State]{Output: state}, err
}

// Delete runs the STORED `delete` over the STORED connection: the state written by the last
// create or update, whatever the program says now (remote/commandController.go, Delete).
func (*Command) Delete(ctx context.Context, req infer.DeleteRequest[State]) (
	infer.DeleteResponse, error,
) {
	stored := req.State
	if stored.Delete == nil {
		return infer.DeleteResponse{}, nil
	}
	return infer.DeleteResponse{}, stored.run(ctx, *stored.Delete)
}

// run executes command in one SSH session (remote/commandOutputs.go, CommandOutputs.run):
//   - `environment` is sent with setenv requests (sshd refuses names AcceptEnv does not list:
//     that fails the run); the previous stdout/stderr likewise, where a refusal only warns;
//   - stdin: `stdin` when not empty;
//   - on failure the error carries the exit status, the command and its interleaved output;
//   - on success stdout and stderr are kept without their last newline.
func (s *State) run(ctx context.Context, command string) error {
	// The client is never closed, as upstream's is not: its connection stays open until the
	// engine stops the provider at the end of the operation, which is what sshd sees.
	client, err := s.Connection.Dial(ctx)
	if err != nil {
		return err
	}
	session, err := client.NewSession()
	if err != nil {
		return err
	}
	defer session.Close()

	for name, value := range s.Environment {
		if err := session.Setenv(name, value); err != nil {
			p.GetLogger(ctx).Error(setenvRefused(name))
			return fmt.Errorf("could not set environment variable %q: %w", name, err)
		}
	}
	if s.AddPreviousOutputInEnv == nil || *s.AddPreviousOutputInEnv {
		previous := [][2]string{
			{shared.PreviousStdout, s.Stdout}, {shared.PreviousStderr, s.Stderr},
		}
		for _, variable := range previous {
			if variable[1] == "" {
				continue
			}
			if err := session.Setenv(variable[0], variable[1]); err != nil {
				p.GetLogger(ctx).Warning(setenvRefused(variable[0]))
			}
		}
	}
	if s.Stdin != nil && *s.Stdin != "" {
		session.Stdin = strings.NewReader(*s.Stdin)
	}

	var stdout, stderr, output bytes.Buffer
	both := &shared.LockedWriter{W: &output}
	logReader, logWriter := io.Pipe()
	outWriters := []io.Writer{&stdout, both}
	if s.Logging.logs("stdout") {
		outWriters = append(outWriters, logWriter)
	}
	errWriters := []io.Writer{&stderr, both}
	if s.Logging.logs("stderr") {
		errWriters = append(errWriters, logWriter)
	}
	session.Stdout = io.MultiWriter(outWriters...)
	session.Stderr = io.MultiWriter(errWriters...)

	logged := make(chan struct{})
	go shared.StreamLines(ctx, logReader, logged)
	err = session.Run(command)
	logWriter.Close()
	<-logged
	if err != nil {
		return fmt.Errorf("%w: running %q:\n%s", err, command, output.String())
	}
	s.Output = Output{
		Stdout: strings.TrimSuffix(stdout.String(), "\n"),
		Stderr: strings.TrimSuffix(stderr.String(), "\n"),
	}
	return nil
}

func setenvRefused(name string) string {
	return fmt.Sprintf("Unable to set '%s'. This only works if your SSH server is configured to "+
		"accept these variables via AcceptEnv. Alternatively, if a Bash-like shell runs the "+
		"command on the remote host, you could prefix the command itself with the variables in "+
		"the form 'VAR=value command'", name)
}
