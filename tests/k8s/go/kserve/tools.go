//go:build tools

// Package tools pins KServe's controller manager, which reconciles the
// InferenceServices in the bridge's tests (Standard deployment mode).
package tools

import (
	_ "github.com/kserve/kserve/cmd/manager"
)
