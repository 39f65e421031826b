/*
 * pool_host.c - a stand-in SPANK host for testing slurm_pool_spank.so
 * outside sbatch and slurmstepd (and under AddressSanitizer or valgrind).
 *
 * It provides the spank_* and slurm_* functions the plugin calls, loads
 * the plugin with dlopen(), and drives its callbacks in the order Slurm
 * does.
 *
 *   pool_host PLUGIN run CONTEXT [--arg A]... [--opt NAME[=VALUE]]...
 *             [--uid N] [--gid N] [--job N] [--extra WORD]...
 *       CONTEXT is allocator, local or remote.  Prints "control K=V" for
 *       every job control variable and "setenv K=V" for every task
 *       variable.  Exit status: 0 ok, 2 an option was refused,
 *       3 init_post_opt failed, 4 user_init failed, 1 usage/host error.
 *       In remote context as root with --uid, user_init runs with the
 *       effective uid/gid of the job's user, as slurmstepd does.
 *
 *   pool_host PLUGIN fuzz N SEED DIR
 *       N rounds of random option values (and direct calls of the parsing
 *       functions); every round also runs the remote context with
 *       base_dir=DIR.  Exit status 0 when every call behaved.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "pool_opts.h"

#define MAX_OPTS 16
#define MAX_ARGS 32

typedef int (*callback_f) (spank_t, int, char **);

static struct {
	spank_context_t ctx;
	struct spank_option *opts[MAX_OPTS];
	int nopts;
	uid_t uid;
	gid_t gid;
	uint32_t job_id;
	int quiet;
} host = { S_CTX_ALLOCATOR, { 0 }, 0, 1000, 1000, 4242, 0 };

static int handle_storage;
#define HANDLE ((spank_t) (void *) &handle_storage)

/* ---- what the plugin may call ---------------------------------------- */

static void vlog(const char *level, const char *fmt, va_list ap)
{
	if (host.quiet)
		return;
	fprintf(stderr, "%s: ", level);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

#define LOGFN(fn, level) \
	void fn(const char *fmt, ...) \
	{ \
		va_list ap; \
		va_start(ap, fmt); \
		vlog(level, fmt, ap); \
		va_end(ap); \
	}

LOGFN(slurm_info, "info")
LOGFN(slurm_error, "error")
LOGFN(slurm_verbose, "verbose")
LOGFN(slurm_debug, "debug")
LOGFN(slurm_debug2, "debug2")
LOGFN(slurm_debug3, "debug3")
LOGFN(slurm_spank_log, "log")

spank_context_t spank_context(void)
{
	return host.ctx;
}

int spank_remote(spank_t sp)
{
	(void) sp;
	return host.ctx == S_CTX_REMOTE;
}

const char *spank_strerror(spank_err_t err)
{
	return err == ESPANK_SUCCESS ? "success" : "spank error";
}

spank_err_t spank_option_register(spank_t sp, struct spank_option *opt)
{
	if (sp != HANDLE || !opt || !opt->name || host.nopts >= MAX_OPTS)
		return ESPANK_BAD_ARG;
	host.opts[host.nopts++] = opt;
	return ESPANK_SUCCESS;
}

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
	va_list ap;
	spank_err_t rc = ESPANK_SUCCESS;

	if (sp != HANDLE || host.ctx != S_CTX_REMOTE)
		return ESPANK_NOT_REMOTE;
	va_start(ap, item);
	switch (item) {
	case S_JOB_UID:
		*va_arg(ap, uid_t *) = host.uid;
		break;
	case S_JOB_GID:
		*va_arg(ap, gid_t *) = host.gid;
		break;
	case S_JOB_ID:
		*va_arg(ap, uint32_t *) = host.job_id;
		break;
	default:
		rc = ESPANK_BAD_ARG;
	}
	va_end(ap);
	return rc;
}

static spank_err_t print_var(const char *kind, const char *name, const char *value)
{
	if (!name || !value)
		return ESPANK_BAD_ARG;
	if (!host.quiet)
		printf("%s %s=%s\n", kind, name, value);
	return ESPANK_SUCCESS;
}

spank_err_t spank_setenv(spank_t sp, const char *var, const char *val, int overwrite)
{
	(void) overwrite;
	if (sp != HANDLE)
		return ESPANK_BAD_ARG;
	if (host.ctx != S_CTX_REMOTE)
		return ESPANK_NOT_REMOTE;
	return print_var("setenv", var, val);
}

spank_err_t spank_job_control_setenv(spank_t sp, const char *name, const char *value,
				     int overwrite)
{
	(void) overwrite;
	if (sp != HANDLE)
		return ESPANK_BAD_ARG;
	if (host.ctx != S_CTX_ALLOCATOR && host.ctx != S_CTX_LOCAL)
		return ESPANK_NOT_LOCAL;
	return print_var("control", name, value);
}

/* ---- driving the plugin -------------------------------------------- */

static void *plugin;

static callback_f symbol(const char *name)
{
	callback_f fn;
	void *sym = dlsym(plugin, name);

	memcpy(&fn, &sym, sizeof(fn));
	return fn;
}

static struct spank_option *find_opt(const char *name, size_t len)
{
	int i;

	for (i = 0; i < host.nopts; i++) {
		if (strlen(host.opts[i]->name) == len && !strncmp(host.opts[i]->name, name, len))
			return host.opts[i];
	}
	return NULL;
}

static int call_init(int ac, char **av)
{
	callback_f init = symbol("slurm_spank_init");

	host.nopts = 0;
	return init ? init(HANDLE, ac, av) : -1;
}

/* "name" or "name=value", as a user would give it. */
static int give_option(const char *spec)
{
	const char *eq = strchr(spec, '=');
	size_t len = eq ? (size_t) (eq - spec) : strlen(spec);
	struct spank_option *opt = find_opt(spec, len);

	if (!opt) {
		fprintf(stderr, "pool_host: no option --%.*s\n", (int) len, spec);
		return -1;
	}
	if (opt->has_arg == 1 && !eq) {
		fprintf(stderr, "pool_host: --%s needs a value\n", opt->name);
		return -1;
	}
	return opt->cb(opt->val, eq ? eq + 1 : NULL, host.ctx == S_CTX_REMOTE);
}

static int user_init_as_user(void)
{
	callback_f user_init = symbol("slurm_spank_user_init");
	int rc, drop = geteuid() == 0 && host.uid != 0;

	if (!user_init)
		return 0;
	if (drop && (setegid(host.gid) < 0 || seteuid(host.uid) < 0)) {
		perror("pool_host: cannot drop privileges");
		return -1;
	}
	rc = user_init(HANDLE, 0, NULL);
	if (drop && (seteuid(0) < 0 || setegid(0) < 0)) {
		perror("pool_host: cannot regain privileges");
		exit(1);
	}
	return rc;
}

static int run(int argc, char **argv)
{
	char *args[MAX_ARGS];
	const char *opts[MAX_ARGS];
	int nargs = 0, nopts = 0, i;
	callback_f post;

	if (argc < 1)
		return 1;
	if (!strcmp(argv[0], "allocator"))
		host.ctx = S_CTX_ALLOCATOR;
	else if (!strcmp(argv[0], "local"))
		host.ctx = S_CTX_LOCAL;
	else if (!strcmp(argv[0], "remote"))
		host.ctx = S_CTX_REMOTE;
	else
		return 1;
	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--arg") && nargs < MAX_ARGS)
			args[nargs++] = argv[i + 1];
		else if (!strcmp(argv[i], "--opt") && nopts < MAX_ARGS)
			opts[nopts++] = argv[i + 1];
		else if (!strcmp(argv[i], "--uid"))
			host.uid = (uid_t) strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--gid"))
			host.gid = (gid_t) strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--job"))
			host.job_id = (uint32_t) strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--extra"))
			return 1;
	}
	if (i != argc)
		return 1;
	if (call_init(nargs, args) != 0) {
		fprintf(stderr, "pool_host: slurm_spank_init failed\n");
		return 1;
	}
	for (i = 0; i < nopts; i++) {
		if (give_option(opts[i]) != 0)
			return 2;
	}
	post = symbol("slurm_spank_init_post_opt");
	if (post && post(HANDLE, nargs, args) != 0)
		return 3;
	if (host.ctx == S_CTX_REMOTE && user_init_as_user() != 0)
		return 4;
	return 0;
}

/* ---- fuzzing ------------------------------------------------------- */

static uint64_t rng_state;

static uint32_t rnd(void)
{
	rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t) (rng_state >> 33);
}

static const char *pieces[] = {
	"0", "1", "10", "5.5", ".", "..", "/", "//", "G", "M", "K", "T", "B", "iB", "gb",
	"SIG", "USR1", "usr2", "KILL", "STOP", "999", "-", "=", " ", "%s", "%n", "\t",
	"ckpt", "a/b", "../x", "99999999999999", "1e9", "~", "\xff", "\x01",
};

static void random_value(char *buf, size_t size)
{
	size_t n = 0, want;

	switch (rnd() % 4) {
	case 0:         /* random bytes, no NUL */
		want = rnd() % (size - 1);
		while (n < want)
			buf[n++] = (char) (1 + rnd() % 255);
		break;
	case 1:         /* as long as it gets */
		want = size - 1 - rnd() % (size < 16 ? size : 16);
		while (n < want)
			buf[n++] = "9./aG"[rnd() % 5];
		break;
	default:        /* plausible pieces */
		want = 1 + rnd() % 6;
		while (want--) {
			const char *p = pieces[rnd() % (sizeof(pieces) / sizeof(pieces[0]))];
			size_t len = strlen(p);
			if (n + len >= size)
				break;
			memcpy(buf + n, p, len);
			n += len;
		}
	}
	buf[n] = '\0';
}

static int check_err(const char *what, int rc, const char *err)
{
	if (rc != 0 && rc != -1) {
		fprintf(stderr, "fuzz: %s returned %d\n", what, rc);
		return 1;
	}
	if (rc == -1 && (strnlen(err, POOL_ERR_MAX) >= POOL_ERR_MAX || !err[0])) {
		fprintf(stderr, "fuzz: %s failed without a message\n", what);
		return 1;
	}
	return 0;
}

static int fuzz(int argc, char **argv)
{
	static char value[4096];
	static char base_arg[POOL_PATH_MAX + 16];
	char err[POOL_ERR_MAX], name[POOL_SIG_MAX], path[POOL_PATH_MAX];
	char *args[1];
	long rounds, r;
	int bad = 0, zone, signum, i;
	uint64_t mb;
	callback_f post;

	if (argc < 3)
		return 1;
	rounds = strtol(argv[0], NULL, 10);
	rng_state = strtoull(argv[1], NULL, 10);
	snprintf(base_arg, sizeof(base_arg), "base_dir=%s", argv[2]);
	args[0] = base_arg;
	host.quiet = 1;
	post = symbol("slurm_spank_init_post_opt");
	for (r = 0; r < rounds; r++) {
		random_value(value, 2 + rnd() % (sizeof(value) - 1));
		memset(err, 0, sizeof(err));
		bad |= check_err("pool_parse_mem", pool_parse_mem(value, &mb, err, sizeof(err)), err);
		if (pool_parse_mem(value, &mb, err, sizeof(err)) == 0 && (mb == 0 || mb > POOL_MEM_MAX_MB)) {
			fprintf(stderr, "fuzz: pool_parse_mem accepted %llu MiB\n", (unsigned long long) mb);
			bad = 1;
		}
		bad |= check_err("pool_parse_signal",
				 pool_parse_signal(value, name, sizeof(name), &signum, err, sizeof(err)), err);
		bad |= check_err("pool_check_dir", pool_check_dir(value, err, sizeof(err)), err);
		bad |= check_err("pool_checkpoint_path",
				 pool_checkpoint_path("/base", value, 7, value, path, sizeof(path), &zone,
						      err, sizeof(err)), err);
		pool_args_have_signal(value, strlen(value) + 1);
		pool_args_have_signal(value, strlen(value));

		/* the plugin itself, in every context */
		host.ctx = (spank_context_t) (S_CTX_LOCAL + rnd() % 3);
		if (call_init(1, args) != 0) {
			fprintf(stderr, "fuzz: slurm_spank_init failed\n");
			return 1;
		}
		for (i = 0; i < host.nopts; i++) {
			const char *arg = value;
			if (host.opts[i]->has_arg == 2 && rnd() % 4 == 0)
				arg = NULL;
			if (host.opts[i]->has_arg == 1 || arg)
				host.opts[i]->cb(host.opts[i]->val, arg, host.ctx == S_CTX_REMOTE);
		}
		if (post)
			post(HANDLE, 1, args);
		if (host.ctx == S_CTX_REMOTE) {
			host.uid = getuid();
			host.gid = getgid();
			user_init_as_user();
		}
	}
	return bad;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: pool_host PLUGIN run CONTEXT ... | pool_host PLUGIN fuzz N SEED DIR\n");
		return 1;
	}
	plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!plugin) {
		fprintf(stderr, "pool_host: %s\n", dlerror());
		return 1;
	}
	if (!strcmp(argv[2], "run")) {
		int rc = run(argc - 3, argv + 3);
		fflush(stdout);
		dlclose(plugin);
		return rc;
	}
	if (!strcmp(argv[2], "fuzz")) {
		int rc = fuzz(argc - 3, argv + 3);
		dlclose(plugin);
		return rc;
	}
	return 1;
}
