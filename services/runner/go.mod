module github.com/heedhq/heed/services/runner

go 1.26.8

require github.com/heedhq/heed/events v0.0.0

require (
	github.com/expr-lang/expr v1.17.8 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/oklog/ulid/v2 v2.1.2 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

replace (
	github.com/heedhq/heed/events => ../../events
	github.com/heedhq/heed/schemas => ../../schemas
)

require github.com/heedhq/heed/services/confirm v0.0.0

replace github.com/heedhq/heed/services/confirm => ../confirm

require github.com/heedhq/heed/services/learner v0.0.0

replace github.com/heedhq/heed/services/learner => ../learner
