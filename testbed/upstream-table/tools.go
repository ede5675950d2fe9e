//go:build tools

// The packages upstream's test table imports that nothing of ours does:
// listed so that `go mod tidy` keeps them (and their sums) in go.mod, and
// `go test` of upstream's package finds them with -mod=readonly.
package upstreamtable

import (
	_ "github.com/onsi/gomega"
	_ "github.com/onsi/gomega/gstruct"
	_ "k8s.io/component-helpers/nodedeclaredfeatures/features/draoptionalnodeoperations"
	_ "k8s.io/klog/v2/ktesting"
)
