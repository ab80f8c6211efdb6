// Command etcd is the etcd server used by the envtest control plane. It is
// built from the go.etcd.io/etcd/server/v3 module so that tests need nothing
// but the Go module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
