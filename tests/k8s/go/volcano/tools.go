//go:build tools

// Package tools pins Volcano's scheduler and controller manager, which run
// the gang jobs (batch.volcano.sh Job) in the bridge's tests.
package tools

import (
	_ "volcano.sh/volcano/cmd/controller-manager"
	_ "volcano.sh/volcano/cmd/scheduler"
)
