module github.com/heedhq/heed/schemas

go 1.26.8

// Local modules: the repository builds on its own, with or without go.work.

// Local modules: the repository builds on its own, with or without go.work.
replace (
	github.com/heedhq/heed/client => ../client
	github.com/heedhq/heed/events => ../events
	github.com/heedhq/heed/lib => ../lib
	github.com/heedhq/heed/services/changesets => ../services/changesets
	github.com/heedhq/heed/services/confirm => ../services/confirm
	github.com/heedhq/heed/services/healer => ../services/healer
	github.com/heedhq/heed/services/indexer => ../services/indexer
	github.com/heedhq/heed/services/learner => ../services/learner
	github.com/heedhq/heed/services/runner => ../services/runner
	github.com/heedhq/heed/tools => ../tools
)
