module github.com/obscura-iot/obscura/e2e

go 1.26.0
