module github.com/heedhq/heed/tools

go 1.26.8

require (
	github.com/heedhq/heed/events v0.0.0
	github.com/heedhq/heed/services/indexer v0.0.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/sys v0.49.0
	golang.org/x/term v0.47.0 // indirect
)

replace (
	github.com/heedhq/heed/events => ../events
	github.com/heedhq/heed/schemas => ../schemas
	github.com/heedhq/heed/services/indexer => ../services/indexer
)

require (
	github.com/heedhq/heed/services/confirm v0.0.0
	github.com/heedhq/heed/services/runner v0.0.0
)

replace (
	github.com/heedhq/heed/services/confirm => ../services/confirm
	github.com/heedhq/heed/services/runner => ../services/runner
)

require github.com/heedhq/heed/services/learner v0.0.0

replace github.com/heedhq/heed/services/learner => ../services/learner

require github.com/heedhq/heed/services/healer v0.0.0

replace github.com/heedhq/heed/services/healer => ../services/healer
