"""Public API: release targets of an engine image (modeled on rules_oci's oci_push).

    load("//tools/release:defs.bzl", "engine_release")
    engine_release(name = "glm53_v3", chain = "//patches:v3", records = "//recipes/releases:records",
                   locks = ["//recipes/bases:debian.lock", "//third_party/python:sglang_cpu.lock"])

creates, next to the engine_image `glm53_v3`:
  glm53_v3.release_facts       build: facts a release record states (cross-checked)
  glm53_v3.release             run:   -- --repository HOST/REPO [--tag T]: record, unpublished
  glm53_v3.push                run:   -- --repository HOST[:PORT]/REPO --tag TAG: push + record
  glm53_v3_release_record_test test:  the committed record still matches the build
  glm53_v3.evidence            build: SBOM, SLSA provenance, DSSE envelope, public key
  glm53_v3.verify              run:   check the evidence (signature, subject digest, SBOM)
  glm53_v3_evidence_test       test:  the same check
  glm53_v3.sign                run:   -- --key KEY.pem --out FILE: sign with a real key
See tools/release/README.md.
"""

load(
    "//tools/release/private:release.bzl",
    _evidence_sign = "evidence_sign",
    _evidence_verify = "evidence_verify",
    _evidence_verify_test = "evidence_verify_test",
    _image_evidence = "image_evidence",
    _push_run = "push_run",
    _release_facts = "release_facts",
    _release_record_test = "release_record_test",
    _release_run = "release_run",
)

release_facts = _release_facts
image_evidence = _image_evidence

# Committed on purpose and clearly marked: see tools/release/testdata/README.md.
TEST_SIGNING_KEY = "//tools/release:testdata/TEST-ONLY-ed25519.pem"

def engine_release(name, chain, records, locks, image = None, key = TEST_SIGNING_KEY, visibility = None, tags = []):
    """Release, push, record-check and evidence targets for the engine_image `image`.

    Args:
      name: the engine_image's name (glm53_v3); targets are named after it.
      chain: the image's patch_chain (for the fingerprint and provenance).
      records: the committed release records (a filegroup; the record test looks for
        <name>.json among them, in their package's directory).
      locks: lock files listed as provenance materials.
      image: the engine_image label (default ":" + name).
      key: ed25519 private key (PEM) the evidence is signed with at build time.
      visibility: visibility of the targets.
      tags: extra tags.
    """
    image = image or ":" + name
    facts = name + ".release_facts"
    _release_facts(
        name = facts,
        image = image,
        patch_layer = image + ".patch_layer",
        patches_json = image + ".patch_layer.patches.json",
        chain = chain,
        visibility = visibility,
        tags = tags,
    )
    _release_run(name = name + ".release", image = image, facts = ":" + facts, visibility = visibility, tags = tags)
    _push_run(name = name + ".push", image = image, facts = ":" + facts, visibility = visibility, tags = tags)
    _release_record_test(
        name = name + "_release_record_test",
        facts = ":" + facts,
        chain = chain,
        record_name = name + ".json",
        records = records,
        size = "small",
        visibility = visibility,
        tags = tags,
    )
    _image_evidence(
        name = name + ".evidence",
        image = image,
        chain = chain,
        facts = ":" + facts,
        locks = locks,
        key = key,
        visibility = visibility,
        tags = tags,
    )
    _evidence_verify(name = name + ".verify", image = image, evidence = ":" + name + ".evidence", visibility = visibility, tags = tags)
    _evidence_verify_test(
        name = name + "_evidence_test",
        image = image,
        evidence = ":" + name + ".evidence",
        size = "small",
        visibility = visibility,
        tags = tags,
    )
    _evidence_sign(name = name + ".sign", evidence = ":" + name + ".evidence", visibility = visibility, tags = tags)
