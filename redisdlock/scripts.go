package redisdlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts are the whole algorithm; docs/redis.md explains it. Each is
// common.lua followed by its own body, and runs atomically on the server.
var (
	//go:embed scripts/common.lua
	commonLua string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/inspect.lua
	inspectLua string

	acquireScript = redis.NewScript(commonLua + acquireLua)
	releaseScript = redis.NewScript(commonLua + releaseLua)
	renewScript   = redis.NewScript(commonLua + renewLua)
	inspectScript = redis.NewScript(commonLua + inspectLua)
)
