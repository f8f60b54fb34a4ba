/*
 * SPANK plugin: an agent's job writes its temporary files inside the agent's storage quota.
 *
 * Slurm 22.05's job_container/tmpfs keeps every job's private /tmp under one BasePath on the
 * node's disk, outside any quota, with no hook to choose where (InitScript came later); and it
 * hides the host's /tmp from every job, where this project's tests keep their sandboxes. So
 * this plugin does the part that matters for agents itself. In each task, just before Slurm
 * drops root (slurm_spank_task_init_privileged), if the job's user has a quota volume
 * (agents/sandbox_storage.py, loop_image, mounted at /srv/rsi-arena/images/<user>), the task
 * gets its own mount namespace in which
 *   - /tmp and /var/tmp are <volume>/jobs/<job id>/tmp and .../var-tmp: the same folders for
 *     every task of the job, counted against the agent's storage quota (ENOSPC past it);
 *   - /dev/shm is a fresh tmpfs, private to the task, of half the job's memory on the node:
 *     a write past it fails with ENOSPC, and it is freed when the task's processes are gone.
 * infra/slurm/epilog.sh deletes <volume>/jobs/<job id> after the job. Users without a volume
 * (the platform, the organizers) are left as they are.
 *
 * Nothing here follows a path the agent controls: the volume's top and jobs/ are root's, and
 * the folders are made by root before the agent's job can run in them. A task that cannot be
 * set up fails rather than write outside the quota.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pwd.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(arena_jobtmp, 1);

#define IMAGES "/srv/rsi-arena/images"

static int make_folder(const char *path, uid_t uid, gid_t gid)
{
	struct stat st;

	if (mkdir(path, 0700) && errno != EEXIST)
		return -1;
	if (lstat(path, &st) || !S_ISDIR(st.st_mode) || chown(path, uid, gid) ||
	    chmod(path, 0700))
		return -1;
	return 0;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	uid_t uid;
	gid_t gid;
	uint32_t job;
	struct passwd *pw;
	uint64_t memory_mb = 0;
	char volume[256], folder[320], tmp[352], var_tmp[352], shm_options[64];
	struct stat vol_st, parent_st;

	if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
		return 0;
	if (!(pw = getpwuid(uid)) || strchr(pw->pw_name, '/') || strlen(pw->pw_name) > 200)
		return 0;
	snprintf(volume, sizeof(volume), IMAGES "/%s", pw->pw_name);
	/* A quota volume is a mount: its device differs from the images folder's. */
	if (lstat(volume, &vol_st) || !S_ISDIR(vol_st.st_mode) ||
	    stat(IMAGES, &parent_st) || vol_st.st_dev == parent_st.st_dev)
		return 0;

	snprintf(folder, sizeof(folder), "%s/jobs/%u", volume, job);
	snprintf(tmp, sizeof(tmp), "%s/tmp", folder);
	snprintf(var_tmp, sizeof(var_tmp), "%s/var-tmp", folder);
	if (make_folder(folder, 0, 0) || chmod(folder, 0755) || make_folder(tmp, uid, gid) ||
	    make_folder(var_tmp, uid, gid)) {
		slurm_error("arena_jobtmp: job %u: preparing %s: %m", job, folder);
		return -1;
	}
	if (spank_get_item(sp, S_JOB_ALLOC_MEM, &memory_mb) != ESPANK_SUCCESS || !memory_mb)
		memory_mb = 2;
	snprintf(shm_options, sizeof(shm_options), "mode=1777,size=%llum",
		 (unsigned long long)(memory_mb / 2 ? memory_mb / 2 : 1));
	/* A namespace of the task's own, private to it: nothing mounted here reaches the host. */
	if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) {
		slurm_error("arena_jobtmp: job %u: private mount namespace: %m", job);
		return -1;
	}
	if (mount(tmp, "/tmp", NULL, MS_BIND, NULL) ||
	    mount(var_tmp, "/var/tmp", NULL, MS_BIND, NULL) ||
	    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, shm_options)) {
		slurm_error("arena_jobtmp: job %u: private /tmp, /var/tmp, /dev/shm: %m", job);
		return -1;
	}
	return 0;
}
