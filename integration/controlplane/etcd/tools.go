//go:build tools

// Package tools only records, for go mod tidy, that ../build.sh compiles the
// etcd server command (the main package at the root of
// go.etcd.io/etcd/server/v3) out of this module. It is never built itself.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
