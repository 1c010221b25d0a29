"""deploy/kubernetes/*.yaml against the Kubernetes schemas (kubernetes-validate, pinned in
scripts/peers-requirements.txt), strict: an unknown field fails.

The core resources (Service, Job, StatefulSet) are validated as they are. JobSet and TrainJob are
CRDs without a schema in kubernetes-validate: their apiVersion and kind are checked, and the
JobSet's job templates are validated as batch/v1 Jobs. Run with the peers venv's python.
"""
import pathlib
import unittest

import kubernetes_validate
import yaml

DEPLOY = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
VERSION = "1.33.0"  # the oldest release with every field used (podFailurePolicy, ...)
CORE = {("v1", "Service"), ("batch/v1", "Job"), ("apps/v1", "StatefulSet")}


def documents(name):
    with open(DEPLOY / name) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def kinds(name):
    return [(d["apiVersion"], d["kind"], d["metadata"]["name"]) for d in documents(name)]


class ManifestsTest(unittest.TestCase):
    def test_the_files(self):
        self.assertEqual(sorted(p.name for p in DEPLOY.glob("*.yaml")),
                         ["indexed-job.yaml", "jobset.yaml", "rendezvous-etcd.yaml",
                          "trainjob.yaml"])

    def test_each_file_holds_its_resources(self):
        self.assertEqual(kinds("indexed-job.yaml"),
                         [("v1", "Service", "dgt-train"), ("batch/v1", "Job", "dgt-train")])
        self.assertEqual(kinds("jobset.yaml"),
                         [("jobset.x-k8s.io/v1alpha2", "JobSet", "dgt-train")])
        self.assertEqual(kinds("trainjob.yaml"),
                         [("trainer.kubeflow.org/v1alpha1", "TrainJob", "dgt-train")])
        self.assertEqual(kinds("rendezvous-etcd.yaml"),
                         [("v1", "Service", "dgt-etcd"), ("apps/v1", "StatefulSet", "dgt-etcd"),
                          ("v1", "Service", "dgt-rendezvous"),
                          ("apps/v1", "StatefulSet", "dgt-rendezvous")])

    def test_core_resources_validate(self):
        checked = 0
        for path in sorted(DEPLOY.glob("*.yaml")):
            for doc in documents(path.name):
                if (doc["apiVersion"], doc["kind"]) not in CORE:
                    continue
                with self.subTest(file=path.name, kind=doc["kind"], name=doc["metadata"]["name"]):
                    kubernetes_validate.validate(doc, VERSION, strict=True)
                    checked += 1
        self.assertEqual(checked, 6)

    def test_jobset_job_templates_validate_as_jobs(self):
        (jobset,) = documents("jobset.yaml")
        (rjob,) = jobset["spec"]["replicatedJobs"]
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "node"},
               "spec": rjob["template"]["spec"]}
        kubernetes_validate.validate(job, VERSION, strict=True)
        env = rjob["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
        self.assertEqual(env[0], {"name": "DGT_JOBSET_JOB_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}}})
        self.assertEqual(env[1], {"name": "DGT_JOBSET_PODS_PER_JOB",
                                  "value": str(rjob["template"]["spec"]["parallelism"])})

    def test_a_broken_manifest_is_refused(self):
        (service, job) = documents("indexed-job.yaml")
        job["spec"]["completionMode"] = 7
        with self.assertRaises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(job, VERSION, strict=True)
        service["spec"]["clusterIp"] = "None"  # misspelt: strict refuses unknown fields
        with self.assertRaises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(service, VERSION, strict=True)

    def test_grace_period_exceeds_shutdown_timeout(self):
        # docs/SCHEDULERS.md: --shutdown-timeout below terminationGracePeriodSeconds.
        (_, job) = documents("indexed-job.yaml")
        pod = job["spec"]["template"]["spec"]
        command = pod["containers"][0]["command"]
        self.assertIn("--shutdown-timeout=30", command)
        self.assertGreater(pod["terminationGracePeriodSeconds"], 30)
        self.assertEqual(pod["subdomain"], "dgt-train")
        self.assertEqual(job["spec"]["completionMode"], "Indexed")


if __name__ == "__main__":
    unittest.main()
