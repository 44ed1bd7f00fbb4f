module molt.dev/test/e2e

go 1.26.0

require molt.dev/pkg v0.0.0

replace molt.dev/pkg => ../../pkg
