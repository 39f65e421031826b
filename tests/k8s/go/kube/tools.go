//go:build tools

// Package tools pins the Kubernetes control-plane programs and etcd for the
// bridge's tests. It is never compiled; the build names the main packages.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
