// Package remote is the stand-in's command:remote:Command and command:remote:CopyToRemote
// (pulumi-command v1.2.1, provider/pkg/provider/remote): commands and copies over SSH.
package remote

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi-go-provider/infer"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/retry"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// Endpoint is one SSH hop's settings (remote/connection.go, connectionBase). Password and keys
// are secrets; the defaults are upstream's (Annotate: user root, port 22, 10 dial errors, 15 s
// per dial).
type Endpoint struct {
	User               *string  `pulumi:"user,optional"`
	Password           *string  `pulumi:"password,optional"           provider:"secret"`
	Host               *string  `pulumi:"host"`
	Port               *float64 `pulumi:"port,optional"`
	PrivateKey         *string  `pulumi:"privateKey,optional"         provider:"secret"`
	PrivateKeyPassword *string  `pulumi:"privateKeyPassword,optional" provider:"secret"`
	AgentSocketPath    *string  `pulumi:"agentSocketPath,optional"`
	DialErrorLimit     *int     `pulumi:"dialErrorLimit,optional"`
	PerDialTimeout     *int     `pulumi:"perDialTimeout,optional"`
	HostKey            *string  `pulumi:"hostKey,optional"`
}

func (e *Endpoint) Annotate(a infer.Annotator) {
	a.SetDefault(&e.User, "root")
	a.SetDefault(&e.Port, 22)
	a.SetDefault(&e.DialErrorLimit, 10)
	a.SetDefault(&e.PerDialTimeout, 15)
}

// Connection is command:remote:Connection: the host, and a bastion to reach it through.
type Connection struct {
	Endpoint
	Proxy *ProxyConnection `pulumi:"proxy,optional"`
}

// ProxyConnection is command:remote:ProxyConnection (remote/proxyConnection.go).
type ProxyConnection struct {
	Endpoint
}

// clientConfig is the ssh.ClientConfig of one hop (connection.go, connectionBase.SSHConfig):
//   - a host key, when given, is the only key accepted and its type the only algorithm offered;
//     without one, any host key is accepted;
//   - authentication, in order: the private key (with its passphrase), the password (also
//     answering keyboard-interactive prompts), the agent at agentSocketPath or $SSH_AUTH_SOCK;
//   - the TCP dial and handshake are bounded by perDialTimeout seconds (0: unbounded).
func (e *Endpoint) clientConfig() (*ssh.ClientConfig, error) {
	config := &ssh.ClientConfig{
		User:    *e.User,
		Timeout: time.Duration(*e.PerDialTimeout) * time.Second,
	}
	if e.HostKey != nil {
		pinned, _, _, _, err := ssh.ParseAuthorizedKey([]byte(*e.HostKey))
		if err != nil {
			return nil, fmt.Errorf("failed to parse host key: %w", err)
		}
		config.HostKeyCallback = ssh.FixedHostKey(pinned)
		config.HostKeyAlgorithms = []string{pinned.Type()}
	} else {
		config.HostKeyCallback = ssh.InsecureIgnoreHostKey() //nolint:gosec // upstream's behaviour
	}
	if e.PrivateKey != nil {
		var signer ssh.Signer
		var err error
		if e.PrivateKeyPassword != nil {
			signer, err = ssh.ParsePrivateKeyWithPassphrase(
				[]byte(*e.PrivateKey), []byte(*e.PrivateKeyPassword))
		} else {
			signer, err = ssh.ParsePrivateKey([]byte(*e.PrivateKey))
		}
		if err != nil {
			return nil, err
		}
		config.Auth = append(config.Auth, ssh.PublicKeys(signer))
	}
	if e.Password != nil {
		password := *e.Password
		config.Auth = append(config.Auth, ssh.Password(password),
			ssh.KeyboardInteractive(func(_, _ string, questions []string, _ []bool) ([]string, error) {
				answers := make([]string, len(questions))
				for i := range answers {
					answers[i] = password
				}
				return answers, nil
			}))
	}
	socket := os.Getenv("SSH_AUTH_SOCK")
	if e.AgentSocketPath != nil {
		socket = *e.AgentSocketPath
	}
	if socket != "" {
		conn, err := net.Dial("unix", socket)
		if err != nil {
			return nil, err
		}
		config.Auth = append(config.Auth, ssh.PublicKeysCallback(agent.NewClient(conn).Signers))
	}
	return config, nil
}

func (e *Endpoint) address() string {
	return net.JoinHostPort(*e.Host, strconv.Itoa(int(*e.Port)))
}

func (e *Endpoint) dialLimit() int {
	if e.DialErrorLimit == nil {
		return 10
	}
	return *e.DialErrorLimit
}

// retryDial calls attempt until it succeeds, the context ends, or it failed more than limit
// times (-1: no limit), reporting each failure as a status line "<what> <n>/<limit> failed:
// retrying" (connection.go, dialWithRetry and reachedDialingErrorLimit; the waits between
// attempts are retry.Until's defaults).
func retryDial[T any](ctx context.Context, what string, limit int, attempt func() (T, error)) (T, error) {
	var last error
	ok, value, err := retry.Until(ctx, retry.Acceptor{
		Accept: func(try int, _ time.Duration) (bool, any, error) {
			result, err := attempt()
			if err == nil {
				return true, result, nil
			}
			last = err
			failures := try + 1
			if limit > -1 && failures > limit {
				return true, nil, fmt.Errorf("after %d failed attempts: %w", try, last)
			}
			shown := "inf"
			if limit != -1 {
				shown = strconv.Itoa(limit)
			}
			p.GetLogger(ctx).InfoStatusf("%s %d/%s failed: retrying", what, failures, shown)
			return false, nil, nil
		},
	})
	var zero T
	if ok && err == nil {
		return value.(T), nil
	}
	if err == nil {
		err = ctx.Err()
	}
	return zero, err
}

// Dial opens the SSH client a Command or a copy runs on, through the proxy when there is one
// (connection.go, Connection.Dial): dial the proxy (its own limit), then a TCP channel from it
// to the host and an SSH handshake over that channel (the host's limit, each retried).
func (c *Connection) Dial(ctx context.Context) (*ssh.Client, error) {
	config, err := c.clientConfig()
	if err != nil {
		return nil, err
	}
	if c.Proxy == nil {
		return retryDial(ctx, "Dial", c.dialLimit(), func() (*ssh.Client, error) {
			return ssh.Dial("tcp", c.address(), config)
		})
	}
	proxyConfig, err := c.Proxy.clientConfig()
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	bastion, err := retryDial(ctx, "Dial proxy", c.Proxy.dialLimit(), func() (*ssh.Client, error) {
		return ssh.Dial("tcp", c.Proxy.address(), proxyConfig)
	})
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	tunnel, err := retryDial(ctx, "Dial from proxy", c.dialLimit(), func() (net.Conn, error) {
		return bastion.Dial("tcp", c.address())
	})
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	type handshake struct {
		conn     ssh.Conn
		channels <-chan ssh.NewChannel
		requests <-chan *ssh.Request
	}
	done, err := retryDial(ctx, "Dial", c.dialLimit(), func() (handshake, error) {
		conn, channels, requests, err := ssh.NewClientConn(tunnel, c.address(), config)
		return handshake{conn, channels, requests}, err
	})
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return ssh.NewClient(done.conn, done.channels, done.requests), nil
}
