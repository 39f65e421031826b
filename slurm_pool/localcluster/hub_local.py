# ruff: noqa: F821
"""jupyterhub_config.py of the local cluster's hub: this machine's part, then the pool's.

JupyterHub runs this file (``jupyterhub -f``); ``get_config`` and
``load_subconfig`` come from it.  The values are in the JSON file named by
``$SLURM_POOL_HUB_SETTINGS`` (written by ``slurm_pool.localcluster.notebooks``);
the pool's part is the fragment ``slurm-pool render`` made from the spec.
Facts behind the settings are in ../shared/jupyterhub/README.md of the
project's sessions, restated here:

* Debian 12 has no sudo: batchspawner runs sbatch as the user through
  ``runuser`` (absolute path), which keeps the environment.
* ``SLURM_CONF`` must reach sbatch, or it looks for a DNS SRV record.
* The emulated nodes' names do not resolve, so the hub reaches every server
  on 127.0.0.1.
"""

import json
import os

settings = json.loads(open(os.environ["SLURM_POOL_HUB_SETTINGS"]).read())
c = get_config()  # type: ignore[name-defined]

c.JupyterHub.bind_url = settings["bind_url"]
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = settings["hub_port"]
c.ConfigurableHTTPProxy.api_url = settings["proxy_api_url"]
c.ConfigurableHTTPProxy.command = [settings["proxy"]]
c.JupyterHub.db_url = "sqlite:///" + os.path.join(settings["state"], "jupyterhub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(settings["state"], "cookie_secret")
c.JupyterHub.pid_file = os.path.join(settings["state"], "jupyterhub.pid")
c.ConfigurableHTTPProxy.pid_file = os.path.join(settings["state"], "jupyterhub-proxy.pid")

c.JupyterHub.authenticator_class = "jupyterhub.authenticators.shared.SharedPasswordAuthenticator"
c.SharedPasswordAuthenticator.user_password = settings["password"]

c.SlurmSpawner.exec_prefix = "/usr/sbin/runuser -u {username} --"
c.SlurmSpawner.env_keep = ["PATH", "LANG", "LC_ALL", "SLURM_CONF"]
c.SlurmSpawner.state_exechost_exp = "127.0.0.1"
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 120

load_subconfig(settings["fragment"])  # type: ignore[name-defined]
