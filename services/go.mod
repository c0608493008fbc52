module github.com/obscura-iot/obscura/services

go 1.26.0
