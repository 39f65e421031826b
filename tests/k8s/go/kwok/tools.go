//go:build tools

// Package tools pins kwok, which plays the kubelets in the bridge's tests.
// kwok v0.7 is built against its own Kubernetes libraries (v0.33), so it has a
// module of its own rather than sharing the control plane's v0.34 ones.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
