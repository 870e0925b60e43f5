module github.com/heedhq/heed/events

go 1.26.8

require (
	github.com/cenkalti/backoff/v5 v5.0.3
	github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2 v2.16.2
	github.com/cloudevents/sdk-go/v2 v2.16.2
	github.com/heedhq/heed/lib v0.0.0
	github.com/heedhq/heed/schemas v0.0.0
	github.com/nats-io/nats.go v1.55.0
	github.com/nats-io/nuid v1.0.1
	github.com/santhosh-tekuri/jsonschema/v5 v5.3.1
	github.com/synadia-io/orbit.go/jetstreamext v0.3.2
)

require (
	github.com/antithesishq/antithesis-sdk-go v0.8.0-default-no-op // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/nats-io/jwt/v2 v2.8.2 // indirect
	github.com/nats-io/nats-server/v2 v2.15.2 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/synadia-io/orbit.go/natsext v0.1.3 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)

// Local modules: the repository builds on its own, with or without go.work.

// Local modules: the repository builds on its own, with or without go.work.
replace (
	github.com/heedhq/heed/client => ../client
	github.com/heedhq/heed/lib => ../lib
	github.com/heedhq/heed/schemas => ../schemas
	github.com/heedhq/heed/services/changesets => ../services/changesets
	github.com/heedhq/heed/services/confirm => ../services/confirm
	github.com/heedhq/heed/services/healer => ../services/healer
	github.com/heedhq/heed/services/indexer => ../services/indexer
	github.com/heedhq/heed/services/learner => ../services/learner
	github.com/heedhq/heed/services/runner => ../services/runner
	github.com/heedhq/heed/tools => ../tools
)
