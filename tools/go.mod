module github.com/heedhq/heed/tools

go 1.26.8

require (
	github.com/heedhq/heed/events v0.0.0
	github.com/heedhq/heed/services/indexer v0.0.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/sys v0.49.0
	golang.org/x/term v0.47.0
)

require (
	github.com/heedhq/heed/services/confirm v0.0.0
	github.com/heedhq/heed/services/runner v0.0.0
)

require github.com/heedhq/heed/services/learner v0.0.0

require (
	github.com/chromedp/chromedp v0.23.0
	github.com/google/jsonschema-go v0.4.3
	github.com/heedhq/heed/client v0.0.0
	github.com/heedhq/heed/lib v0.0.0
	github.com/heedhq/heed/services/changesets v0.0.0
	github.com/heedhq/heed/services/escalator v0.0.0
	github.com/heedhq/heed/services/healer v0.0.0
	github.com/modelcontextprotocol/go-sdk v1.8.0
	github.com/nats-io/nats-server/v2 v2.15.2
	github.com/nats-io/nats.go v1.55.0
	github.com/nats-io/nkeys v0.4.16
	github.com/prometheus/client_golang v1.25.0
	github.com/slack-go/slack v0.35.0
	golang.org/x/crypto v0.58.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/antithesishq/antithesis-sdk-go v0.8.0-default-no-op // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/chromedp/cdproto v0.159.0 // indirect
	github.com/cloudevents/sdk-go/v2 v2.16.2 // indirect
	github.com/cpuguy83/go-md2man/v2 v2.0.6 // indirect
	github.com/expr-lang/expr v1.17.8 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/gorilla/websocket v1.5.3 // indirect
	github.com/heedhq/heed/schemas v0.0.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/nats-io/jwt/v2 v2.8.2 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/oklog/ulid/v2 v2.1.2 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/santhosh-tekuri/jsonschema/v5 v5.3.1 // indirect
	github.com/segmentio/asm v1.1.3 // indirect
	github.com/segmentio/encoding v0.5.4 // indirect
	github.com/synadia-io/orbit.go/jetstreamext v0.3.2 // indirect
	github.com/synadia-io/orbit.go/natsext v0.1.3 // indirect
	github.com/yosida95/uritemplate/v3 v3.0.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/oauth2 v0.37.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// Local modules: the repository builds on its own, with or without go.work.

// Local modules: the repository builds on its own, with or without go.work.
replace (
	github.com/heedhq/heed/client => ../client
	github.com/heedhq/heed/events => ../events
	github.com/heedhq/heed/lib => ../lib
	github.com/heedhq/heed/schemas => ../schemas
	github.com/heedhq/heed/services/changesets => ../services/changesets
	github.com/heedhq/heed/services/confirm => ../services/confirm
	github.com/heedhq/heed/services/escalator => ../services/escalator
	github.com/heedhq/heed/services/healer => ../services/healer
	github.com/heedhq/heed/services/indexer => ../services/indexer
	github.com/heedhq/heed/services/learner => ../services/learner
	github.com/heedhq/heed/services/runner => ../services/runner
)
