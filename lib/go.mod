module github.com/heedhq/heed/lib

go 1.26.8

require github.com/heedhq/heed/events v0.0.0

replace (
	github.com/heedhq/heed/events => ../events
	github.com/heedhq/heed/schemas => ../schemas
)
