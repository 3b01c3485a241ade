// Command pulumi-resource-command is a STAND-IN for pulumi-command v1.2.1's provider binary,
// used by the real-engine tests because that provider's Go module cannot be built here
// (tools/engine/modules/command/README.md). It is not the real provider.
package main

import (
	"context"
	"fmt"
	"os"

	"gpu-cluster/tools/engine/command/provider"
)

// Version is what the engine records for this plugin: pulumi-command's version with a
// build tag that says what it is (build metadata: the engine compares it equal to 1.2.1, so
// it warns of no older plugin).
const Version = "1.2.1+standin"

func main() {
	if err := provider.New().Run(context.Background(), "command", Version); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %s", err)
		os.Exit(1)
	}
}
