module github.com/sluicehq/sluice/tools/ceiling

go 1.26.0
