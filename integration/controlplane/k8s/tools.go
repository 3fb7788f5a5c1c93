//go:build tools

// Package tools only records, for go mod tidy, which Kubernetes commands
// ../build.sh compiles out of this module (kubelet and kube-proxy only for
// integration/node, kubeadm only for integration/kind). It is never built itself.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
