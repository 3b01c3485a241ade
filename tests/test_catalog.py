"""Every entry of components/catalog.py held to AWS's published figures for its instance type.

The table below is written out independently of the catalog: instance type -> (GPU count, GPU
memory per GPU as AWS states it, the unit AWS states it in, maximum EFA interfaces). A catalog
type missing from the table fails, so a new entry must come with its published figures.

Sources (checked with the `search` tool, corpora `docs` and `pages`, and the repositories named):
- AWS Batch User Guide, "Run GPU jobs"
  (docs.aws.amazon.com/batch/latest/userguide/gpu-jobs.html; found as its pt_BR, ko_KR, de_DE
  and docs.amazonaws.cn copies): GPUs and total GPU memory (GiB) per type for g4dn (not
  metal), g5, g6 (xlarge to 16xlarge), p3 and p3dn. Per-GPU memory = total / GPUs.
- Amazon EC2 User Guide, "Linux accelerated computing instances", Hardware specifications
  table, "Accelerators" column (source repository awsdocs/amazon-ec2-user-guide,
  doc_source/accelerated-computing-instances.md): p3.*, p3dn.24xlarge, p4d.24xlarge and every
  g4dn size including g4dn.metal (8); "each [G4] GPU has 16 GiB of GDDR6 memory".
- AWS Compute Blog, "Amazon EC2 P4d instances deep dive" (aws.amazon.com/blogs/compute/
  amazon-ec2-p4d-instances-deep-dive, syndicated copies in `pages`): p4d "8 x 40 GB NVIDIA
  Tesla A100 GPUs" and "400 Gbps Elastic Fabric Adapter (EFA)".
- Amazon EC2 User Guide, "Maximize network bandwidth on Amazon EC2 instances with multiple
  network cards" (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html): the P5
  request "with 32 EFA devices and one ENA device".
- Amazon EC2 User Guide, "Elastic Fabric Adapter", Supported instance types
  (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html, as quoted in the index): EFA on
  g4dn, g5, g6, g6e, p3dn.24xlarge, p4d/p4de, p5/p5e (and p5en, p6-b200 in the Nitro v5 row);
  p3 (other than p3dn) is not an EFA type.
- Karpenter's instance type reference (aws/karpenter-provider-aws,
  website/content/en/docs/reference/instance-types.md, generated from EC2 DescribeInstanceTypes;
  snapshot 1d927085, 2026-08-21): karpenter.k8s.aws/instance-gpu-count, instance-gpu-memory
  (MiB) and the vpc.amazonaws.com/efa resource (EfaInfo.MaximumEfaInterfaces) for every type
  here except p3.*. The per-size EFA maxima come from this table; the docs pages found by
  search name the EFA families but not each size's maximum.
- Corroboration for single rows (not AWS pages): aws/sagemaker-hyperpod-cli #390
  (ml.g6e.48xlarge efa 4); meta-pytorch/torchx #969, #995, #1098 (g6e.24xlarge 2 EFA,
  p5en.48xlarge 16, p5e.48xlarge 32); dstackai/dstack #4110 (p5en H200:141GB:8).

The EC2 "Accelerated computing instance specifications" page
(docs.aws.amazon.com/ec2/latest/instancetypes/ac.html) was not in the searchable corpora, so no
figure below is quoted from it. Rows whose figure could not be confirmed from an AWS page say so.

GPU memory: `GpuModel` has no docstring saying whether `memory_gib` is GiB or GB, so the
comparison is exact (no GiB/GB tolerance) against the number AWS states, in the unit recorded.
"""

from __future__ import annotations

import pytest

from components.catalog import CATALOG

# instance type -> (GPUs, GPU memory per GPU as AWS states it, its unit, maximum EFA interfaces)
AWS_FIGURES: dict[str, tuple[int, int, str, int]] = {
    # G4dn, NVIDIA T4. Batch "Run GPU jobs": xlarge..16xlarge 1/1/1/1/4/1 GPUs, 16 GiB each
    # (12xlarge 64 GiB). EC2 User Guide hardware table: g4dn.metal 8 accelerators.
    # EFA: Karpenter (DescribeInstanceTypes) 1 on 8xlarge, 12xlarge, 16xlarge and metal, none below.
    "g4dn.xlarge": (1, 16, "GiB", 0),
    "g4dn.2xlarge": (1, 16, "GiB", 0),
    "g4dn.4xlarge": (1, 16, "GiB", 0),
    "g4dn.8xlarge": (1, 16, "GiB", 1),
    "g4dn.12xlarge": (4, 16, "GiB", 1),
    "g4dn.16xlarge": (1, 16, "GiB", 1),
    # g4dn.metal: 8 GPUs from the EC2 User Guide; 16 GiB per GPU from its G4 text ("each GPU has
    # 16 GiB"), not from a per-type memory row (the Batch table stops at 16xlarge).
    "g4dn.metal": (8, 16, "GiB", 1),
    # G5, NVIDIA A10G. Batch "Run GPU jobs": 24 GiB per GPU (12xlarge/24xlarge 96 GiB, 48xlarge
    # 192 GiB). EFA: Karpenter, 1 from 8xlarge up.
    "g5.xlarge": (1, 24, "GiB", 0),
    "g5.2xlarge": (1, 24, "GiB", 0),
    "g5.4xlarge": (1, 24, "GiB", 0),
    "g5.8xlarge": (1, 24, "GiB", 1),
    "g5.12xlarge": (4, 24, "GiB", 1),
    "g5.16xlarge": (1, 24, "GiB", 1),
    "g5.24xlarge": (4, 24, "GiB", 1),
    "g5.48xlarge": (8, 24, "GiB", 1),
    # G6, NVIDIA L4. Batch "Run GPU jobs": xlarge..16xlarge, 24 GiB per GPU. The 12xlarge,
    # 24xlarge and 48xlarge rows were cut off in what search returned: their GPU counts (4, 4, 8)
    # are confirmed by Karpenter only. EFA: Karpenter, 1 from 8xlarge up.
    "g6.xlarge": (1, 24, "GiB", 0),
    "g6.2xlarge": (1, 24, "GiB", 0),
    "g6.4xlarge": (1, 24, "GiB", 0),
    "g6.8xlarge": (1, 24, "GiB", 1),
    "g6.16xlarge": (1, 24, "GiB", 1),
    "g6.12xlarge": (4, 24, "GiB", 1),  # count: Karpenter only
    "g6.24xlarge": (4, 24, "GiB", 1),  # count: Karpenter only
    "g6.48xlarge": (8, 24, "GiB", 1),  # count: Karpenter only
    # G6e, NVIDIA L40S. GPU counts and EFA: Karpenter (EFA 1/1/1, 24xlarge 2, 48xlarge 4;
    # 48xlarge 4 also aws/sagemaker-hyperpod-cli, 24xlarge 2 also torchx). The per-GPU memory
    # (48 GB) is NOT confirmed from an AWS page: search found no AWS G6e memory figure, and
    # Karpenter's DescribeInstanceTypes value is 45776 MiB.
    "g6e.xlarge": (1, 48, "GB", 0),
    "g6e.2xlarge": (1, 48, "GB", 0),
    "g6e.4xlarge": (1, 48, "GB", 0),
    "g6e.8xlarge": (1, 48, "GB", 1),
    "g6e.16xlarge": (1, 48, "GB", 1),
    "g6e.12xlarge": (4, 48, "GB", 1),
    "g6e.24xlarge": (4, 48, "GB", 2),
    "g6e.48xlarge": (8, 48, "GB", 4),
    # P3, NVIDIA V100 16 GiB. Batch "Run GPU jobs": 1/4/8 GPUs, 16/64/128 GiB; EC2 User Guide
    # hardware table: 1/4/8 accelerators. Not an EFA type (EFA user guide lists p3dn only).
    "p3.2xlarge": (1, 16, "GiB", 0),
    "p3.8xlarge": (4, 16, "GiB", 0),
    "p3.16xlarge": (8, 16, "GiB", 0),
    # P3dn, V100 32 GiB. Batch (docs.amazonaws.cn): 8 GPUs, 256 GiB. EFA 1: Karpenter.
    "p3dn.24xlarge": (8, 32, "GiB", 1),
    # P4d: blog "8 x 40 GB" A100, 400 Gbps EFA. EFA maximum 4: Karpenter (4 x 100 Gbps cards).
    "p4d.24xlarge": (8, 40, "GB", 4),
    # P4de, A100 80 GB. NOT confirmed from an AWS page by search: GPUs 8, 81920 MiB per GPU and
    # EFA 4 from Karpenter only.
    "p4de.24xlarge": (8, 80, "GB", 4),
    # P5, H100. EFA 32: efa-acc-inst-types ("32 EFA devices"), Karpenter. Per-GPU 80 GB NOT
    # confirmed from an AWS page by search (Karpenter: 8 GPUs, 81920 MiB).
    "p5.48xlarge": (8, 80, "GB", 32),
    # P5e, H200 141 GB. GPUs 8, EFA 32: Karpenter (EFA 32 also torchx #1098). Memory NOT
    # confirmed from an AWS page by search (Karpenter: 144384 MiB).
    "p5e.48xlarge": (8, 141, "GB", 32),
    # P5en, H200 141 GB. GPUs 8, EFA 16: Karpenter (also torchx #995; H200:141GB:8 in dstack's
    # offer listing from the EC2 API). Memory NOT confirmed from an AWS page by search.
    "p5en.48xlarge": (8, 141, "GB", 16),
    # P6-B200, B200. GPUs 8, EFA 8: Karpenter only (NOT confirmed from an AWS page by search).
    # Memory NOT confirmed from an AWS page: Karpenter 183359 MiB (= 179 GiB); third-party pages
    # say 179 GB or 180 GB.
    "p6-b200.48xlarge": (8, 179, "GiB", 8),
}


def test_every_catalog_type_has_published_figures():
    missing = sorted(set(CATALOG) - set(AWS_FIGURES))
    assert not missing, (
        f"catalog types without AWS's published figures in tests/test_catalog.py: {missing}; "
        "add each with its GPU count, GPU memory and maximum EFA interfaces from "
        "docs.aws.amazon.com/ec2/latest/instancetypes/ac.html"
    )


def test_no_figures_for_types_the_catalog_dropped():
    stale = sorted(set(AWS_FIGURES) - set(CATALOG))
    assert not stale, f"tests/test_catalog.py has figures for types not in the catalog: {stale}"


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_gpu_count_is_aws_published(instance_type):
    assert instance_type in AWS_FIGURES, f"{instance_type}: no published figures in the table"
    gpus, _, _, _ = AWS_FIGURES[instance_type]
    assert CATALOG[instance_type].gpu_count == gpus, (
        f"{instance_type}: catalog says {CATALOG[instance_type].gpu_count} GPUs, AWS {gpus}"
    )


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_efa_interfaces_are_aws_maximum(instance_type):
    assert instance_type in AWS_FIGURES, f"{instance_type}: no published figures in the table"
    _, _, _, efa = AWS_FIGURES[instance_type]
    assert CATALOG[instance_type].efa_interfaces == efa, (
        f"{instance_type}: catalog says {CATALOG[instance_type].efa_interfaces} EFA interfaces, "
        f"AWS's maximum is {efa}"
    )


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_gpu_memory_is_aws_published(instance_type):
    # Exact: GpuModel does not document whether memory_gib is GiB or GB, so no unit tolerance.
    assert instance_type in AWS_FIGURES, f"{instance_type}: no published figures in the table"
    _, memory, unit, _ = AWS_FIGURES[instance_type]
    assert CATALOG[instance_type].gpu.memory_gib == memory, (
        f"{instance_type}: catalog GPU memory {CATALOG[instance_type].gpu.memory_gib}, "
        f"AWS states {memory} {unit} per GPU"
    )
