// A k3s-like multicall binary, for the node audit's and the repair's tests: one file that is
// containerd when its argv[0]'s base name is "containerd" (containerd's own command package, as
// k3s embeds it and picks what to run from argv[0]); with "render BASE TEMPLATE CONFIG", does what
// k3s does with containerd's config at each start: CONFIG written anew from TEMPLATE where it
// exists (Go's text/template, BASE defined as the template "base", as k3s defines its built-in
// one), else from BASE alone; and otherwise stands for the k3s process that embeds kubelet: it
// says so and waits for TERM. Built by lab/build.sh multicall V into a cache of its own, as "k3s",
// with a "containerd" symlink beside it, the way a k3s data directory lays them out.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/template"

	"github.com/containerd/containerd/v2/cmd/containerd/command"

	_ "github.com/containerd/containerd/v2/cmd/containerd/builtins"
)

func main() {
	if filepath.Base(os.Args[0]) == "containerd" {
		if err := command.App().Run(context.Background(), os.Args); err != nil {
			_, _ = fmt.Fprintln(os.Stderr, "containerd:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) == 5 && os.Args[1] == "render" {
		if err := render(os.Args[2], os.Args[3], os.Args[4]); err != nil {
			_, _ = fmt.Fprintln(os.Stderr, "k3s-like render:", err)
			os.Exit(1)
		}
		return
	}
	fmt.Fprintln(os.Stderr, "k3s-like multicall: kubelet would run in this process; waiting for TERM")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}

// render writes config anew: from tmpl (with base as its template "base") where tmpl exists, else
// base itself; whole, renamed over the old one.
func render(base, tmpl, config string) error {
	text, err := os.ReadFile(base)
	if err != nil {
		return err
	}
	if own, err := os.ReadFile(tmpl); err == nil {
		t, err := template.New("config").Parse(string(own))
		if err == nil {
			_, err = t.New("base").Parse(string(text))
		}
		var out bytes.Buffer
		if err == nil {
			err = t.Execute(&out, nil)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", tmpl, err)
		}
		text = out.Bytes()
	} else if !os.IsNotExist(err) {
		return err
	}
	if err := os.WriteFile(config+".tmp", text, 0o600); err != nil {
		return err
	}
	return os.Rename(config+".tmp", config)
}
