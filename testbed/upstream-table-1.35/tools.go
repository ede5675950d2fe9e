//go:build tools

// The module whose table runs (its structured package, which holds the
// table's experimental package) and the packages the table and our glue
// file (simulate_test.go.in) import that nothing else here does: listed so
// that `go mod tidy` keeps them (and their sums) in go.mod, and `go test`
// of upstream's package finds them with -mod=readonly.
package upstreamtable

import (
	_ "github.com/amd/ainic-dra/testbed/upstream-table"
	_ "github.com/go-logr/logr"
	_ "github.com/onsi/gomega"
	_ "github.com/onsi/gomega/gstruct"
	_ "k8s.io/dynamic-resource-allocation/structured"
	_ "k8s.io/klog/v2/ktesting"
)
