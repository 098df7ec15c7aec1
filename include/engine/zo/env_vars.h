/* The environment variables zoffload reads that a user may set, checked once
 * at start-up (engine/config/env_vars.c): every command but `env` refuses an
 * invalid value before it reads a config or takes a run directory's lock, and
 * `zoffload env` reports it. The kernels and backends read the same variables
 * later and keep their own checks as contracts. Test-only variables (ZO_FAULT,
 * ZO_FAULT_COUNTS, ZO_COMM_MAX_COUNT, ZO_TEST_*) and the MPI launchers' rank
 * and size variables (offload/launcher.c checks those) are not in this list. */
#ifndef ZO_ENV_VARS_H
#define ZO_ENV_VARS_H

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when every variable listed in docs/config.md ("Environment variables") is unset, empty or
 * valid; else -EINVAL with a message naming the first invalid variable, its
 * value and the valid values (zo_last_error()). Reads the environment only. */
int zo_env_vars_check(void);

/* The same for one of those variables, by name (a name not in the list is a
 * broken contract). */
int zo_env_var_check(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* ZO_ENV_VARS_H */
