// Command statusagg is molt's statusagg service. See internal/statusagg for what it does.
package main

import (
	"context"

	"molt.dev/pkg/service"
	"molt.dev/services/statusagg/internal/statusagg"
)

func main() {
	var cfg statusagg.Config
	service.Main("statusagg", cfg.RegisterFlags, func(ctx context.Context) error { return statusagg.Run(ctx, cfg) })
}
