package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"gpu-cluster/tools/engine/command/shared"
)

// run executes command as pulumi-command's local run does (local/commandOutputs.go, run):
//   - argv: the interpreter (default /bin/sh -c) followed by the command;
//   - working directory: `dir`, else the provider's own (the engine starts it in the project's);
//   - environment: the provider's own, then `environment`, then PULUMI_COMMAND_STDOUT/STDERR
//     from the previous run unless addPreviousOutputInEnv is false;
//   - stdin: `stdin` when not empty;
//   - on failure the error carries the exit status, the command and its interleaved output;
//   - on success stdout and stderr are kept without their last newline.
func run(ctx context.Context, command string, options Options, out *Output) error {
	if options.AssetPaths != nil || options.ArchivePaths != nil {
		return errors.New("the command stand-in does not collect assetPaths or archivePaths")
	}
	argv := []string{"/bin/sh", "-c"}
	if options.Interpreter != nil && len(*options.Interpreter) > 0 {
		argv = append([]string{}, *options.Interpreter...)
	}
	argv = append(argv, command)

	process := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if options.Dir != nil {
		process.Dir = *options.Dir
	} else {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		process.Dir = wd
	}
	process.Env = os.Environ()
	if options.Environment != nil {
		for name, value := range *options.Environment {
			process.Env = append(process.Env, name+"="+value)
		}
	}
	if options.AddPreviousOutputInEnv == nil || *options.AddPreviousOutputInEnv {
		if out.Stdout != "" {
			process.Env = append(process.Env, shared.PreviousStdout+"="+out.Stdout)
		}
		if out.Stderr != "" {
			process.Env = append(process.Env, shared.PreviousStderr+"="+out.Stderr)
		}
	}
	if options.Stdin != nil && *options.Stdin != "" {
		process.Stdin = strings.NewReader(*options.Stdin)
	}

	var stdout, stderr, both bytes.Buffer
	interleaved := &shared.LockedWriter{W: &both}
	logReader, logWriter := io.Pipe()
	outWriters := []io.Writer{&stdout, interleaved}
	if options.Logging.logs("stdout") {
		outWriters = append(outWriters, logWriter)
	}
	errWriters := []io.Writer{&stderr, interleaved}
	if options.Logging.logs("stderr") {
		errWriters = append(errWriters, logWriter)
	}
	process.Stdout = io.MultiWriter(outWriters...)
	process.Stderr = io.MultiWriter(errWriters...)

	logged := make(chan struct{})
	go shared.StreamLines(ctx, logReader, logged)
	err := process.Run()
	logWriter.Close()
	<-logged
	if err != nil {
		return fmt.Errorf("%w: running %q:\n%s", err, command, both.String())
	}
	out.Stdout = strings.TrimSuffix(stdout.String(), "\n")
	out.Stderr = strings.TrimSuffix(stderr.String(), "\n")
	return nil
}
