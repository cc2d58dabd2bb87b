module github.com/sluicehq/sluice/tools/load

go 1.26.0
