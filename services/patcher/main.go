// Command patcher is molt's patcher service. See internal/patcher for what it does.
package main

import (
	"context"

	"molt.dev/pkg/service"
	"molt.dev/services/patcher/internal/patcher"
)

func main() {
	var cfg patcher.Config
	service.Main("patcher", cfg.RegisterFlags, func(ctx context.Context) error { return patcher.Run(ctx, cfg) })
}
