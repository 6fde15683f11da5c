module github.com/dlockdev/dlock/httpfence

go 1.26.0

replace github.com/dlockdev/dlock => ..

require github.com/dlockdev/dlock v0.0.0-00010101000000-000000000000
