/*
 * slurm_pool_spank.c - SPANK plugin of slurm-pool.
 *
 * Options (sbatch, srun, salloc):
 *   --checkpoint[=DIR]       the job checkpoints when it is preempted
 *   --checkpoint-signal=SIG  the signal it wants before preemption
 *   --gpu-mem=SIZE           GPU memory it needs per GPU (10G, 10240M, 10GB)
 *
 * Allocator/local context (sbatch, salloc, srun): bad values stop the
 * client with a message; good ones go to the job control environment as
 * SLURM_POOL_CHECKPOINT, SLURM_POOL_CHECKPOINT_DIR,
 * SLURM_POOL_CHECKPOINT_SIGNAL, SLURM_POOL_GPU_MEM_MB (and
 * SLURM_POOL_SIGNAL=1 when the command line or environment asks for
 * --signal), where job_submit.lua (job_desc.spank_job_env) and the prolog
 * (as SPANK_SLURM_POOL_*) see them.
 *
 * Remote context (slurmstepd): the checkpoint directory is created if
 * missing, owned by the job's user, walking the path with openat/mkdirat
 * and O_NOFOLLOW so that no symbolic link the user controls is followed;
 * tasks get SLURM_POOL_CHECKPOINT, SLURM_POOL_CHECKPOINT_DIR,
 * SLURM_POOL_CHECKPOINT_SIGNAL, SLURM_POOL_CHECKPOINT_SIGNUM,
 * SLURM_POOL_CHECKPOINT_WARN_SECONDS and SLURM_POOL_GPU_MEM_MB.
 *
 * Plugin arguments (plugstack.conf): base_dir=PATH signal=SIG warn_seconds=N.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "pool_opts.h"

SPANK_PLUGIN(slurm_pool, 1);

#define CMDLINE_MAX (256 * 1024)

static struct pool_conf conf;

static struct {
	int checkpoint;                 /* --checkpoint or --checkpoint-signal */
	char dir[POOL_PATH_MAX];        /* DIR as given; empty: the default */
	char signal[POOL_SIG_MAX];      /* empty: the pool's default */
	int signum;
	uint64_t gpu_mem_mb;            /* 0: not given */
	char path[POOL_PATH_MAX];       /* the resolved directory (remote) */
	int zone;                       /* see pool_checkpoint_path() */
} job;

static int opt_checkpoint(int val, const char *optarg, int remote);
static int opt_checkpoint_signal(int val, const char *optarg, int remote);
static int opt_gpu_mem(int val, const char *optarg, int remote);

static struct spank_option options[] = {
	{ "checkpoint", "[DIR]",
	  "The job checkpoints when preempted: it gets a signal first and "
	  "SLURM_POOL_CHECKPOINT_DIR says where to save. DIR defaults to a "
	  "per-job directory in the pool's checkpoint area; a relative DIR is "
	  "placed in your own part of it.", 2, 0, opt_checkpoint },
	{ "checkpoint-signal", "SIG",
	  "Signal the job wants before it is preempted (default: the pool's, "
	  "usually USR1). Implies --checkpoint.", 1, 0, opt_checkpoint_signal },
	{ "gpu-mem", "SIZE",
	  "GPU memory the job needs per GPU, e.g. 10G, 10240M or 10GB; a small "
	  "need may be placed on a MIG slice.", 1, 0, opt_gpu_mem },
	SPANK_OPTIONS_TABLE_END
};

/*
 * Slurm passes an option given without its optional value on to slurmstepd,
 * and through the job's environment to srun inside the job, as "" or as
 * "(null)".  Only sbatch and salloc see exactly what the user typed.
 */
static int no_value(const char *optarg, int remote)
{
	if (!optarg || !strcmp(optarg, "(null)"))
		return 1;
	return !optarg[0] && (remote || spank_context() != S_CTX_ALLOCATOR);
}

static int opt_checkpoint(int val, const char *optarg, int remote)
{
	char err[POOL_ERR_MAX];

	(void) val;
	if (no_value(optarg, remote))
		optarg = NULL;
	if (optarg && pool_check_dir(optarg, err, sizeof(err)) < 0) {
		slurm_error("slurm-pool: --checkpoint: %s", err);
		return -1;
	}
	job.checkpoint = 1;
	snprintf(job.dir, sizeof(job.dir), "%s", optarg ? optarg : "");
	return 0;
}

static int opt_checkpoint_signal(int val, const char *optarg, int remote)
{
	char err[POOL_ERR_MAX];

	(void) val;
	(void) remote;
	if (pool_parse_signal(optarg, job.signal, sizeof(job.signal), &job.signum,
			      err, sizeof(err)) < 0) {
		job.signal[0] = '\0';
		slurm_error("slurm-pool: --checkpoint-signal: %s", err);
		return -1;
	}
	job.checkpoint = 1;
	return 0;
}

static int opt_gpu_mem(int val, const char *optarg, int remote)
{
	char err[POOL_ERR_MAX];
	uint64_t mb = 0;

	(void) val;
	(void) remote;
	if (pool_parse_mem(optarg, &mb, err, sizeof(err)) < 0) {
		slurm_error("slurm-pool: --gpu-mem: %s", err);
		return -1;
	}
	job.gpu_mem_mb = mb;
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	char err[POOL_ERR_MAX];
	spank_context_t ctx = spank_context();
	int i;

	pool_conf_init(&conf);
	memset(&job, 0, sizeof(job));
	for (i = 0; i < ac; i++) {
		if (pool_conf_arg(&conf, av[i], err, sizeof(err)) < 0)
			slurm_error("slurm-pool: plugstack.conf: %s; using the default", err);
	}
	if (ctx != S_CTX_ALLOCATOR && ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE)
		return 0;
	for (i = 0; options[i].name; i++) {
		if (spank_option_register(sp, &options[i]) != ESPANK_SUCCESS) {
			slurm_error("slurm-pool: cannot register --%s", options[i].name);
			return -1;
		}
	}
	return 0;
}

static void control_setenv(spank_t sp, const char *name, const char *value)
{
	spank_err_t rc = spank_job_control_setenv(sp, name, value, 1);

	if (rc != ESPANK_SUCCESS)
		slurm_debug("slurm-pool: cannot set %s in the job control environment: %s",
			    name, spank_strerror(rc));
}

/* Does this client (sbatch, salloc, srun) carry --signal? */
static int signal_requested(void)
{
	char *buf;
	ssize_t got;
	size_t len = 0;
	int fd, found;

	if (getenv("SBATCH_SIGNAL") || getenv("SALLOC_SIGNAL") || getenv("SLURM_SIGNAL"))
		return 1;
	fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	buf = malloc(CMDLINE_MAX);
	if (!buf) {
		close(fd);
		return 0;
	}
	while (len < CMDLINE_MAX) {
		got = read(fd, buf + len, CMDLINE_MAX - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		len += (size_t) got;
	}
	close(fd);
	found = pool_args_have_signal(buf, len);
	free(buf);
	return found;
}

static int client_post_opt(spank_t sp)
{
	char num[32];

	if (job.checkpoint) {
		control_setenv(sp, "SLURM_POOL_CHECKPOINT", "1");
		if (job.dir[0])
			control_setenv(sp, "SLURM_POOL_CHECKPOINT_DIR", job.dir);
		control_setenv(sp, "SLURM_POOL_CHECKPOINT_SIGNAL",
			       job.signal[0] ? job.signal : conf.signal);
	}
	if (job.gpu_mem_mb) {
		snprintf(num, sizeof(num), "%" PRIu64, job.gpu_mem_mb);
		control_setenv(sp, "SLURM_POOL_GPU_MEM_MB", num);
	}
	if (signal_requested())
		control_setenv(sp, "SLURM_POOL_SIGNAL", "1");
	return 0;
}

/* As root in slurmstepd: resolve the directory; create it when it lies in
 * the pool's checkpoint area. */
static int remote_post_opt(spank_t sp)
{
	char err[POOL_ERR_MAX];
	char user[256];
	char pwbuf[4096];
	struct passwd pw, *found = NULL;
	uid_t uid;
	gid_t gid;
	uint32_t job_id;
	int flags;

	if (!job.checkpoint)
		return 0;
	if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
		slurm_error("slurm-pool: --checkpoint: cannot tell the job's user and id");
		return -1;
	}
	if (getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &found) == 0 && found && found->pw_name)
		snprintf(user, sizeof(user), "%s", found->pw_name);
	else
		snprintf(user, sizeof(user), "%u", (unsigned) uid);
	if (pool_checkpoint_path(conf.base_dir, user, job_id, job.dir, job.path,
				 sizeof(job.path), &job.zone, err, sizeof(err)) < 0) {
		slurm_error("slurm-pool: --checkpoint: %s", err);
		return -1;
	}
	if (job.zone < 0)
		return 0;       /* the user's own path: created in user_init */
	flags = POOL_MKDIR_OWNER | (geteuid() == 0 ? POOL_MKDIR_CHOWN : 0);
	if (pool_mkdirs(job.path, job.zone, 0755, 0700, uid, gid, flags, err, sizeof(err)) < 0) {
		slurm_error("slurm-pool: checkpoint directory: %s", err);
		return -1;
	}
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	switch (spank_context()) {
	case S_CTX_ALLOCATOR:
	case S_CTX_LOCAL:
		return client_post_opt(sp);
	case S_CTX_REMOTE:
		return remote_post_opt(sp);
	default:
		return 0;
	}
}

static int task_setenv(spank_t sp, const char *name, const char *value)
{
	spank_err_t rc = spank_setenv(sp, name, value, 1);

	if (rc != ESPANK_SUCCESS) {
		slurm_error("slurm-pool: cannot set %s: %s", name, spank_strerror(rc));
		return -1;
	}
	return 0;
}

/* In slurmstepd with the user's rights: create an absolute DIR, then tell
 * the tasks everything. */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	char err[POOL_ERR_MAX];
	char num[32];
	int rc = 0;

	(void) ac;
	(void) av;
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	if (job.checkpoint) {
		if (job.zone < 0 &&
		    pool_mkdirs(job.path, -1, 0700, 0700, 0, 0, 0, err, sizeof(err)) < 0) {
			slurm_error("slurm-pool: checkpoint directory: %s", err);
			return -1;
		}
		rc |= task_setenv(sp, "SLURM_POOL_CHECKPOINT", "1");
		rc |= task_setenv(sp, "SLURM_POOL_CHECKPOINT_DIR", job.path);
		rc |= task_setenv(sp, "SLURM_POOL_CHECKPOINT_SIGNAL",
				  job.signal[0] ? job.signal : conf.signal);
		snprintf(num, sizeof(num), "%d", job.signal[0] ? job.signum : conf.signum);
		rc |= task_setenv(sp, "SLURM_POOL_CHECKPOINT_SIGNUM", num);
		snprintf(num, sizeof(num), "%u", conf.warn_seconds);
		rc |= task_setenv(sp, "SLURM_POOL_CHECKPOINT_WARN_SECONDS", num);
	}
	if (job.gpu_mem_mb) {
		snprintf(num, sizeof(num), "%" PRIu64, job.gpu_mem_mb);
		rc |= task_setenv(sp, "SLURM_POOL_GPU_MEM_MB", num);
	}
	return rc ? -1 : 0;
}
