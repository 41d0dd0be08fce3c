"""tf.train.ClusterSpec and tf.distribute.cluster_resolver (issue 14): the
cluster of a parameter-server job, from TF_CONFIG or given by hand. Strata's
engine checks the whole cluster again when a task starts (exactly one chief,
addresses given once, ...: docs/PARAMETER_SERVER.md); what is checked here is
each entry's shape, so that a mistake is named before any socket opens."""
import json
import os
import re

_ADDR = re.compile(r"^[^\s:]+:(\d+)$")


def _check_address(job, i, a):
    if not isinstance(a, str):
        raise ValueError("ClusterSpec: %s[%d] = %r: an address must be a 'host:port' string" % (job, i, a))
    m = _ADDR.match(a)
    if not m or not 1 <= int(m.group(1)) <= 65535:
        raise ValueError("ClusterSpec: %s[%d] = %r: expected 'host:port' with port 1..65535" % (job, i, a))
    return a


class ClusterSpec:
    """tf.train.ClusterSpec: job name -> list of 'host:port' addresses (a
    dict {index: address} is accepted too, as TF, when its indices are
    0..n-1)."""

    def __init__(self, cluster):
        if isinstance(cluster, ClusterSpec):
            cluster = cluster.as_dict()
        if not isinstance(cluster, dict):
            raise ValueError("ClusterSpec: expected a dict of job name -> addresses, got %r" % (cluster,))
        self._jobs = {}
        for job, tasks in cluster.items():
            if not isinstance(job, str) or not job:
                raise ValueError("ClusterSpec: job name %r is not a non-empty string" % (job,))
            if isinstance(tasks, dict):
                if sorted(tasks) != list(range(len(tasks))):
                    raise ValueError("ClusterSpec: %s: task indices %r are not 0..%d" % (job, sorted(tasks), len(tasks) - 1))
                tasks = [tasks[i] for i in range(len(tasks))]
            elif isinstance(tasks, str) or not isinstance(tasks, (list, tuple)):
                raise ValueError("ClusterSpec: %s: expected a list of addresses, got %r" % (job, tasks))
            self._jobs[job] = [_check_address(job, i, a) for i, a in enumerate(tasks)]

    def as_dict(self):
        return {job: list(tasks) for job, tasks in self._jobs.items()}

    @property
    def jobs(self):
        return list(self._jobs)

    def num_tasks(self, job_name):
        if job_name not in self._jobs:
            raise ValueError("ClusterSpec: no such job %r (jobs: %s)" % (job_name, ", ".join(self._jobs)))
        return len(self._jobs[job_name])

    def task_indices(self, job_name):
        return list(range(self.num_tasks(job_name)))

    def job_tasks(self, job_name):
        self.num_tasks(job_name)
        return list(self._jobs[job_name])

    def task_address(self, job_name, task_index):
        n = self.num_tasks(job_name)
        if not isinstance(task_index, int) or not 0 <= task_index < n:
            raise ValueError("ClusterSpec: %s task %r out of range (0..%d)" % (job_name, task_index, n - 1))
        return self._jobs[job_name][task_index]

    def __bool__(self):
        return bool(self._jobs)

    def __eq__(self, other):
        return isinstance(other, ClusterSpec) and self.as_dict() == other.as_dict()

    def __repr__(self):
        return "ClusterSpec(%r)" % (self.as_dict(),)


class ClusterResolver:
    """Base of the resolvers: cluster_spec(), task_type, task_id, rpc_layer."""

    def __init__(self, cluster_spec, task_type=None, task_id=None, rpc_layer=None):
        self._spec = cluster_spec
        self.task_type, self.task_id, self.rpc_layer = task_type, task_id, rpc_layer

    def cluster_spec(self):
        return self._spec

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        t = task_type if task_type is not None else self.task_type
        i = task_id if task_id is not None else self.task_id
        if t is None or i is None:
            return ""
        addr = self._spec.task_address(t, i)
        layer = rpc_layer or self.rpc_layer
        return "%s://%s" % (layer, addr) if layer else addr

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        return {}

    @property
    def environment(self):
        return ""

    def _tf_config(self, what):
        """TF_CONFIG's JSON text for this task (what Strata's engine reads)."""
        if self.task_type is None or self.task_id is None:
            raise ValueError("%s: the cluster resolver has no task_type / task_id" % what)
        self._spec.task_address(self.task_type, self.task_id)
        return json.dumps({"cluster": self._spec.as_dict(),
                           "task": {"type": self.task_type, "index": int(self.task_id)}})


class SimpleClusterResolver(ClusterResolver):
    """tf.distribute.cluster_resolver.SimpleClusterResolver(cluster_spec,
    task_type=, task_id=)."""

    def __init__(self, cluster_spec, master="", task_type=None, task_id=None, environment="",
                 num_accelerators=None, rpc_layer=None):
        if not isinstance(cluster_spec, ClusterSpec):
            cluster_spec = ClusterSpec(cluster_spec)
        super().__init__(cluster_spec, task_type, task_id, rpc_layer)
        if task_type is not None:
            cluster_spec.num_tasks(task_type)
        if task_id is not None and task_type is not None:
            cluster_spec.task_address(task_type, task_id)


class TFConfigClusterResolver(ClusterResolver):
    """tf.distribute.cluster_resolver.TFConfigClusterResolver: the cluster and
    this task from the TF_CONFIG environment variable (JSON: {"cluster":
    {...}, "task": {"type": ..., "index": ...}}). Unlike TensorFlow, a missing
    or empty TF_CONFIG raises ValueError (Strata has no single-process
    fallback for a cluster)."""

    def __init__(self, task_type=None, task_id=None, rpc_layer=None, environment=None):
        text = os.environ.get("TF_CONFIG")
        if not text:
            raise ValueError("TFConfigClusterResolver: TF_CONFIG is not set (expected JSON such as "
                             '{"cluster": {"chief": [...], "worker": [...], "ps": [...]}, '
                             '"task": {"type": "worker", "index": 0}})')
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise ValueError("TF_CONFIG: not valid JSON (%s)" % e) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("cluster"), dict):
            raise ValueError("TF_CONFIG: no \"cluster\" object")
        task = doc.get("task", {})
        if not isinstance(task, dict):
            raise ValueError("TF_CONFIG: \"task\" is not an object")
        spec = ClusterSpec(doc["cluster"])
        t = task_type if task_type is not None else task.get("type")
        i = task_id if task_id is not None else task.get("index", 0)
        if t is not None and (not isinstance(t, str) or t not in spec.jobs):
            raise ValueError("TF_CONFIG: task.type %r is not a job of the cluster (%s)" % (t, ", ".join(spec.jobs)))
        if t is not None and (not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < spec.num_tasks(t)):
            raise ValueError("TF_CONFIG: task.index %r out of range for job %s (0..%d)" % (i, t, spec.num_tasks(t) - 1))
        super().__init__(spec, t, i if t is not None else None, rpc_layer or doc.get("rpc_layer"))
        self._environment = doc.get("environment", "")

    @property
    def environment(self):
        return self._environment


__all__ = ["ClusterSpec", "ClusterResolver", "SimpleClusterResolver", "TFConfigClusterResolver"]
