// A k3s-like multicall binary, for the node audit's tests: one file that is containerd when its
// argv[0]'s base name is "containerd" (containerd's own command package, as k3s embeds it and
// picks what to run from argv[0]), and otherwise stands for the k3s process that embeds kubelet:
// it says so and waits for TERM. Built by lab/build.sh multicall V into that containerd's cache,
// as "k3s", with a "containerd" symlink beside it, the way a k3s data directory lays them out.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

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
	fmt.Fprintln(os.Stderr, "k3s-like multicall: kubelet would run in this process; waiting for TERM")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
