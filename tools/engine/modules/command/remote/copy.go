package remote

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/pkg/sftp"
	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi-go-provider/infer"
	"github.com/pulumi/pulumi-go-provider/infer/types"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
)

// CopyToRemote is command:remote:CopyToRemote (remote/copy.go, copyController.go).
type CopyToRemote struct{}

// CopyInputs of command:remote:CopyToRemote (remote/copy.go, CopyToRemoteInputs).
type CopyInputs struct {
	Connection *Connection          `pulumi:"connection"        provider:"secret"`
	Triggers   *[]any               `pulumi:"triggers,optional" provider:"replaceOnChanges"`
	Source     types.AssetOrArchive `pulumi:"source"`
	RemotePath string               `pulumi:"remotePath"`
}

// CopyState is the inputs, unchanged (remote/copy.go, CopyToRemoteOutputs).
type CopyState struct {
	CopyInputs
}

func (c *CopyInputs) digest() string {
	if c.Source.Archive != nil {
		return c.Source.Archive.Hash
	}
	return c.Source.Asset.Hash
}

// Check refuses a source that is neither exactly one asset or archive, nor a file asset, a
// text asset or a path archive (copyController.go, CopyToRemote.Check).
func (*CopyToRemote) Check(ctx context.Context, req infer.CheckRequest) (
	infer.CheckResponse[CopyInputs], error,
) {
	inputs, failures, err := infer.DefaultCheck[CopyInputs](ctx, req.NewInputs)
	if err != nil {
		return infer.CheckResponse[CopyInputs]{Inputs: inputs, Failures: failures}, err
	}
	asset, archive := inputs.Source.Asset, inputs.Source.Archive
	fail := func(property, reason string) {
		failures = append(failures, p.CheckFailure{Property: property, Reason: reason})
	}
	switch {
	case asset != nil && archive != nil:
		fail("asset", "only one of asset or archive can be set")
	case asset == nil && archive == nil:
		fail("asset", "either asset or archive must be set")
	}
	if asset != nil && !asset.IsPath() && !asset.IsText() {
		fail("asset", "asset must be a path-based file asset or a text asset")
	}
	if archive != nil && !archive.IsPath() {
		fail("archive", "archive must be a path to a file or directory")
	}
	return infer.CheckResponse[CopyInputs]{Inputs: inputs, Failures: failures}, nil
}

// Create copies the source (not in a preview); the id is random (copyController.go, Create).
func (*CopyToRemote) Create(ctx context.Context, req infer.CreateRequest[CopyInputs]) (
	infer.CreateResponse[CopyState], error,
) {
	state := CopyState{req.Inputs}
	if req.DryRun {
		return infer.CreateResponse[CopyState]{Output: state}, nil
	}
	if err := copySource(ctx, req.Inputs); err != nil {
		return infer.CreateResponse[CopyState]{Output: state}, err
	}
	id, err := resource.NewUniqueHex("", 8, 0)
	return infer.CreateResponse[CopyState]{ID: id, Output: state}, err
}

// Update copies again only when the source's hash or the remote path changed
// (copyController.go, Update). There is no Delete: the copied files stay on the host.
func (*CopyToRemote) Update(ctx context.Context, req infer.UpdateRequest[CopyInputs, CopyState]) (
	infer.UpdateResponse[CopyState], error,
) {
	state := CopyState{req.Inputs}
	if req.DryRun {
		return infer.UpdateResponse[CopyState]{Output: state}, nil
	}
	before, after := req.State.CopyInputs, req.Inputs
	if after.digest() == before.digest() && after.RemotePath == before.RemotePath {
		return infer.UpdateResponse[CopyState]{Output: state}, nil
	}
	return infer.UpdateResponse[CopyState]{Output: state}, copySource(ctx, after)
}

// copySource dials, opens SFTP (concurrent writes, as upstream) and writes the source.
func copySource(ctx context.Context, in CopyInputs) error {
	client, err := in.Connection.Dial(ctx)
	if err != nil {
		return err
	}
	defer client.Close()
	remote, err := sftp.NewClient(client, sftp.UseConcurrentWrites(true))
	if err != nil {
		return err
	}
	defer remote.Close()
	if in.Source.Asset != nil && in.Source.Asset.IsText() {
		return writeText(remote, in.Source.Asset.Text, in.RemotePath)
	}
	if in.Source.Asset != nil {
		return copyPath(remote, in.Source.Asset.Path, in.RemotePath)
	}
	return copyPath(remote, in.Source.Archive.Path, in.RemotePath)
}

// stat is the remote path's info, nil when it does not exist.
func stat(remote *sftp.Client, path string) (fs.FileInfo, error) {
	info, err := remote.Stat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("failed to stat remote path %s: %w", path, err)
	}
	return info, nil
}

// writeText writes a text asset to a file path, making its parents; a directory there is an
// error (copyController.go, copyTextContent).
func writeText(remote *sftp.Client, text, path string) error {
	info, err := stat(remote, path)
	if err != nil {
		return err
	}
	if info != nil && info.IsDir() {
		return fmt.Errorf("remote path %s is a directory; when using a text asset, remotePath must be a file path", path)
	}
	if err := remote.MkdirAll(filepath.Dir(path)); err != nil {
		return fmt.Errorf("failed to create parent directories for %s: %w", path, err)
	}
	file, err := remote.Create(path)
	if err != nil {
		return fmt.Errorf("failed to create remote file %s: %w", path, err)
	}
	defer file.Close()
	if _, err := file.Write([]byte(text)); err != nil {
		return fmt.Errorf("failed to write text content to remote path %s: %w", path, err)
	}
	return nil
}

// copyPath copies a local file or directory with cp-like rules (copyController.go, sftpCopy):
//
//	source | remote is a directory | remote missing        | remote is a file
//	dir    | remote/dir            | remote/dir (made)     | error
//	dir/   | remote/<each entry>   | remote (made)         | error
//	file   | remote/file           | remote (parents made) | remote, overwritten
func copyPath(remote *sftp.Client, source, destination string) error {
	local, err := os.Stat(source)
	if err != nil {
		return err
	}
	existing, err := stat(remote, destination)
	if err != nil {
		return err
	}
	if !local.IsDir() {
		target := destination
		if existing != nil && existing.IsDir() {
			target = filepath.Join(destination, filepath.Base(source))
		} else if existing == nil {
			if err := remote.MkdirAll(filepath.Dir(destination)); err != nil {
				return fmt.Errorf("failed to create parent directories for %s: %w", destination, err)
			}
		}
		return copyFile(remote, source, target)
	}
	if existing == nil {
		if err := remote.MkdirAll(destination); err != nil {
			return fmt.Errorf("failed to create remote directory %s: %w", destination, err)
		}
	}
	target := destination
	if !strings.HasSuffix(source, "/") {
		target = filepath.Join(destination, filepath.Base(source))
		inner, err := stat(remote, target)
		if err != nil {
			return err
		}
		if inner != nil && !inner.IsDir() {
			return fmt.Errorf("remote path %s exists but is not a directory", target)
		}
		if inner == nil {
			if err := remote.Mkdir(target); err != nil {
				return fmt.Errorf("failed to create remote directory %s: %w", target, err)
			}
		}
	}
	return fs.WalkDir(os.DirFS(source), ".", func(path string, entry fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		into := filepath.Join(target, path)
		if !entry.IsDir() {
			return copyFile(remote, filepath.Join(source, path), into)
		}
		info, err := stat(remote, into)
		if err != nil {
			return err
		}
		if info == nil {
			if err := remote.Mkdir(into); err != nil {
				return fmt.Errorf("failed to create remote directory %s: %w", into, err)
			}
		} else if !info.IsDir() {
			return fmt.Errorf("remote path %s exists but is not a directory", into)
		}
		return nil
	})
}

func copyFile(remote *sftp.Client, source, destination string) error {
	local, err := os.Open(source)
	if err != nil {
		return err
	}
	defer local.Close()
	file, err := remote.Create(destination)
	if err != nil {
		return fmt.Errorf("failed to create remote file %s: %w", destination, err)
	}
	defer file.Close()
	if _, err := file.ReadFrom(local); err != nil {
		return fmt.Errorf("failed to copy file %s to remote path %s: %w", source, destination, err)
	}
	return nil
}
