/*
 * pool_opts.h - option parsing and safe directory creation for the
 * slurm-pool SPANK plugin.
 *
 * Nothing here calls Slurm: every function reports problems through an
 * error buffer, so the code can be tested and fuzzed outside sbatch and
 * slurmstepd.
 */
#ifndef POOL_OPTS_H
#define POOL_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define POOL_PATH_MAX 1024      /* longest checkpoint path accepted */
#define POOL_SIG_MAX 16         /* room for a signal name ("VTALRM") */
#define POOL_ERR_MAX 256        /* room for an error message */
#define POOL_MEM_MAX_MB (16ULL * 1024 * 1024)   /* 16 TiB */
#define POOL_WARN_MAX 86400

/* Flags of pool_mkdirs(). */
#define POOL_MKDIR_CHOWN 1      /* fchown what is created in the user zone */
#define POOL_MKDIR_OWNER 2      /* existing user-zone dirs must belong to uid */

/* Plugin arguments from plugstack.conf. */
struct pool_conf {
	char base_dir[POOL_PATH_MAX];
	char signal[POOL_SIG_MAX];
	int signum;
	unsigned warn_seconds;
};

/* Defaults: base_dir /var/lib/slurm-pool/checkpoints, USR1, 120 s. */
void pool_conf_init(struct pool_conf *conf);

/* Apply one "key=value" plugin argument (base_dir, signal, warn_seconds). */
int pool_conf_arg(struct pool_conf *conf, const char *arg, char *err, size_t errlen);

/*
 * A GPU memory size: digits with an optional fraction and an optional
 * binary unit K, M, G or T (also KB/KiB, ...; any case).  No unit means
 * MiB, as for Slurm's --mem.  Stores MiB (rounded up) in *mb.
 */
int pool_parse_mem(const char *s, uint64_t *mb, char *err, size_t errlen);

/*
 * A signal by name ("USR1", "SIGUSR1", any case) or number.  Only signals
 * a job can catch are accepted.  Stores the name without "SIG".
 */
int pool_parse_signal(const char *s, char *name, size_t namelen, int *signum,
		      char *err, size_t errlen);

/* A checkpoint directory: absolute, or relative to <base_dir>/<user>. */
int pool_check_dir(const char *s, char *err, size_t errlen);

/*
 * The checkpoint directory of a job: <base>/<user>/<job_id> by default,
 * <base>/<user>/<dir> for a relative dir, dir itself when absolute.
 * *user_zone is the number of leading path components that belong to the
 * system (base_dir); the rest belongs to the user.  -1 when dir is absolute
 * (no user zone: such a directory is created with the user's own rights).
 */
int pool_checkpoint_path(const char *base, const char *user, uint32_t job_id,
			 const char *dir, char *out, size_t outlen,
			 int *user_zone, char *err, size_t errlen);

/*
 * Does a NUL-separated argument vector (as in /proc/self/cmdline) carry
 * --signal, or an abbreviation of it no shorter than --sig, before "--"?
 * The first argument (the program) is skipped.
 */
int pool_args_have_signal(const char *buf, size_t len);

/*
 * Create the directory path (absolute) and its missing parents, walking
 * one component at a time with openat(O_NOFOLLOW) and mkdirat().
 *
 * Components [0, user_zone) are system territory: created with sys_mode,
 * and a symbolic link there is followed only when root owns it and its
 * directory is root's and not writable by group or others.  Components
 * from user_zone on are the user's: symbolic links are never followed,
 * what is created gets user_mode (and uid:gid with POOL_MKDIR_CHOWN), and
 * with POOL_MKDIR_OWNER an existing directory must belong to uid or root.
 * Pass user_zone < 0 for "no user zone".
 */
int pool_mkdirs(const char *path, int user_zone, mode_t sys_mode, mode_t user_mode,
		uid_t uid, gid_t gid, int flags, char *err, size_t errlen);

#endif /* POOL_OPTS_H */
