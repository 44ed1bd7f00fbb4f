package service

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Env reads flag defaults from environment variables and remembers every
// value that does not parse, so start-up can fail naming the variable.
// Every service uses it for its own flags: a flag wins over its variable.
type Env struct{ errs []error }

// String returns the variable, or def when it is unset.
func (e *Env) String(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

// Bool returns the variable parsed as a bool, or def.
func (e *Env) Bool(key string, def bool) bool {
	return parseEnv(e, key, def, strconv.ParseBool, "not true or false")
}

// Int returns the variable parsed as an int, or def.
func (e *Env) Int(key string, def int) int {
	return parseEnv(e, key, def, strconv.Atoi, "not an integer")
}

// Float returns the variable parsed as a float, or def.
func (e *Env) Float(key string, def float64) float64 {
	return parseEnv(e, key, def, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }, "not a number")
}

// Duration returns the variable parsed as a duration, or def.
func (e *Env) Duration(key string, def time.Duration) time.Duration {
	return parseEnv(e, key, def, time.ParseDuration, "not a duration such as 30s")
}

// Err joins the errors of every variable that did not parse.
func (e *Env) Err() error { return errors.Join(e.errs...) }

func parseEnv[T any](e *Env, key string, def T, parse func(string) (T, error), want string) T {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def
	}
	out, err := parse(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("env %s=%q: %s", key, v, want))
		return def
	}
	return out
}
