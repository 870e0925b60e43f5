module github.com/heedhq/heed/schemas

go 1.26.8
