// The runtime side of NRI for the Rust NRI plugin's integration tests:
// upstream's adaptation package from github.com/containerd/nri v0.12.2,
// driven by JSON lines on stdin (see main.go).
module github.com/amd/ainic-dra/testbed/nri-runtime

go 1.26.0

require (
	github.com/containerd/nri v0.12.2
	google.golang.org/protobuf v1.34.1
)

require (
	github.com/containerd/log v0.1.0 // indirect
	github.com/containerd/ttrpc v1.2.7 // indirect
	github.com/golang/protobuf v1.5.3 // indirect
	github.com/knqyf263/go-plugin v0.9.0 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	github.com/tetratelabs/wazero v1.11.0 // indirect
	go.yaml.in/yaml/v3 v3.0.4 // indirect
	golang.org/x/mod v0.32.0 // indirect
	golang.org/x/sys v0.39.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20230731190214-cbb8c96f2d6d // indirect
	google.golang.org/grpc v1.57.1 // indirect
)

tool github.com/amd/ainic-dra/testbed/nri-runtime
