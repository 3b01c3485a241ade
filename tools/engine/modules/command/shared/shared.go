// Package shared holds what pulumi-command's local and remote Commands have in common: the
// lifecycle inputs (provider/pkg/provider/common/inputs.go, ResourceInputs), the environment
// variables carrying the previous output (provider/pkg/provider/util/util.go) and the
// line-by-line logging of a command's output (util.go, LogOutput).
package shared

import (
	"bufio"
	"context"
	"io"
	"sync"

	p "github.com/pulumi/pulumi-go-provider"
)

// Lifecycle is embedded in both Commands' inputs. A change of Triggers replaces the resource
// (the framework reads the replaceOnChanges tag into the schema and the diff); create, update
// and delete are the commands run at each step.
type Lifecycle struct {
	Triggers *[]any  `pulumi:"triggers,optional" provider:"replaceOnChanges"`
	Create   *string `pulumi:"create,optional"`
	Update   *string `pulumi:"update,optional"`
	Delete   *string `pulumi:"delete,optional"`
}

// The variables a command finds the previous create's or update's output in.
const (
	PreviousStdout = "PULUMI_COMMAND_STDOUT"
	PreviousStderr = "PULUMI_COMMAND_STDERR"
)

// UpdateCommand is what an update runs: `update`, else `create`, else nothing
// (local/commandController.go and remote/commandController.go, Update).
func (l Lifecycle) UpdateCommand() *string {
	if l.Update != nil {
		return l.Update
	}
	return l.Create
}

// StreamLines sends each line read from r to the engine as an info status message, as
// LogOutput does, and closes done at the end of r.
func StreamLines(ctx context.Context, r io.Reader, done chan<- struct{}) {
	defer close(done)
	lines := bufio.NewScanner(r)
	for lines.Scan() {
		p.GetLogger(ctx).InfoStatus(lines.Text())
	}
}

// LockedWriter lets two goroutines (a process's stdout and stderr copiers) share one buffer.
type LockedWriter struct {
	W  io.Writer
	mu sync.Mutex
}

func (w *LockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.W.Write(b)
}
