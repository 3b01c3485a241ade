// Package provider assembles the stand-in: the three resources the gpu-cluster program uses,
// under the tokens pulumi-command v1.2.1 gives them (provider/pkg/provider/provider.go,
// NewProvider: infer.Provider with local.Command, remote.Command, remote.CopyToRemote; the
// token's module is the Go package name, its name the type name).
package provider

import (
	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi-go-provider/infer"
	"github.com/pulumi/pulumi-go-provider/middleware/schema"

	"gpu-cluster/tools/engine/command/local"
	"gpu-cluster/tools/engine/command/remote"
)

// New returns the stand-in provider. Left out of upstream's: the deprecated remote.CopyFile and
// the local.run invoke, which the program does not use.
func New() p.Provider {
	return infer.Provider(infer.Options{
		Metadata: schema.Metadata{
			DisplayName: "Command (stand-in)",
			Description: "A stand-in for pulumi-command v1.2.1 in gpu-cluster's real-engine tests; " +
				"not the real provider.",
		},
		Resources: []infer.InferredResource{
			infer.Resource(&local.Command{}),
			infer.Resource(&remote.Command{}),
			infer.Resource(&remote.CopyToRemote{}),
		},
	})
}
