module github.com/sluicehq/sluice

go 1.26.0

require (
	github.com/fsnotify/fsnotify v1.10.1
	github.com/platinummonkey/go-concurrency-limits v1.0.0
	github.com/valyala/fasthttp v1.78.0
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v3 v3.0.6
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/molecule-man/go-brrr v1.3.1 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
)
