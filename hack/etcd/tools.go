//go:build tools

// The etcd tools the local cluster takes and restores snapshots with
// (localcluster etcd snapshot|restore), built beside the server.
package main

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
)
