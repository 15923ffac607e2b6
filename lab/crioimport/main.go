// Command crio-import copies one image into CRI-O's store (containers-storage), since nothing can
// be pulled in the lab: the images of the lab's Pods are OCI archives (lab/standin/images.py).
// Built inside CRI-O's own module (lab/build.sh crio), so its image and storage libraries are the
// daemon's own.
//
//	crio-import oci-archive:/lab/read.tar 'containers-storage:[vfs@/var/lib/containers/storage+/run/containers/storage]docker.io/library/busybox:1.37'
package main

import (
	"context"
	"fmt"
	"os"

	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/transports/alltransports"
	"go.podman.io/storage/pkg/reexec"
)

func main() {
	if reexec.Init() { // the store unpacks layers in a child of this binary, as CRI-O's does
		return
	}
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: crio-import SOURCE DESTINATION (each TRANSPORT:REFERENCE)")
		os.Exit(2)
	}
	if err := copied(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintf(os.Stderr, "crio-import: %s -> %s: %v\n", os.Args[1], os.Args[2], err)
		os.Exit(1)
	}
}

func copied(from, to string) error {
	src, err := alltransports.ParseImageName(from)
	if err != nil {
		return err
	}
	dst, err := alltransports.ParseImageName(to)
	if err != nil {
		return err
	}
	// the archive is the lab's own: no signature to check
	policy, err := signature.NewPolicyContext(&signature.Policy{
		Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()}})
	if err != nil {
		return err
	}
	defer policy.Destroy()
	_, err = copy.Image(context.Background(), policy, dst, src, &copy.Options{})
	return err
}
