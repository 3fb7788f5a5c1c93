//go:build tools

// Package tools only records, for go mod tidy, which containerd commands ../build.sh compiles out
// of this module. It is never built itself.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
