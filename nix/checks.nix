# `nix flake check`: ruff, the import contracts, the hermetic part of the test suite (the suite
# minus what tests/left-out.json lists, with why), and the NixOS VM test. `boxmaker`:
# nix/packages.nix built with this pkgs.
{ pkgs, self, boxmaker }:
let
  python = pkgs.python3;

  # import-linter is not in nixpkgs (its dependency grimp is): the release uv.lock pins, from
  # its PyPI wheel (pure Python), with the hash uv.lock records for that wheel.
  importLinter = python.pkgs.import-linter or (python.pkgs.buildPythonPackage {
    pname = "import-linter";
    version = "2.17";
    format = "wheel";
    src = pkgs.fetchurl {
      url = "https://files.pythonhosted.org/packages/b6/45/baf897d969b4e19d9e063ffb13bc12346b1af6b36e1774841d16d84cf3cc/import_linter-2.17-py3-none-any.whl";
      hash = "sha256-DiOgtka9QiwKqv32v7sSlWOgVcGWjtsxCciBGjLZiAI=";
    };
    dependencies = with python.pkgs; [ click grimp rich ];
    pythonImportsCheck = [ "importlinter" ];
  });

  # The workspace's Python packages themselves (not their toPythonApplication wrappers, which
  # withPackages would drop), and the dev group of pyproject.toml.
  testPython = python.withPackages (ps: builtins.attrValues boxmaker.members ++ [
    ps.pytest ps.pytest-timeout ps.hypothesis ps.uvicorn ps.jsonschema ps.pyyaml importLinter
  ]);

  inSource = name: inputs: script: pkgs.runCommand "boxmaker-${name}" { nativeBuildInputs = inputs; } ''
    cp -r ${self} source && chmod -R u+w source && cd source
    ${script}
    touch $out
  '';
in
{
  ruff = inSource "ruff" [ pkgs.ruff ] "ruff check --no-cache .";
  import-linter = inSource "import-linter" [ testPython ] "lint-imports --no-cache";
  # systemd: systemd-creds; skopeo: reading an OCI layout's digest (tests/sandbox/test_image_builder.py).
  tests = inSource "tests" [ testPython pkgs.systemd pkgs.skopeo ] ''
    export HOME=$TMPDIR HYPOTHESIS_PROFILE=ci
    # The suite minus what tests/left-out.json lists for this check (make gate reads it too).
    python3 -m pytest -p no:cacheprovider --left-out=flake --junitxml=$TMPDIR/report.xml tests
    python3 - $TMPDIR/report.xml <<'EOF'
    import sys, xml.etree.ElementTree as ET
    suite = ET.parse(sys.argv[1]).getroot().find("testsuite")
    ran, skipped = int(suite.get("tests")), int(suite.get("skipped"))
    if skipped or not ran:
        sys.exit(f"{skipped} of {ran} tests skipped: the check's tests must need nothing it lacks")
    EOF
  '';
  vm = import ../nixos-modules/tests/vm.nix { inherit pkgs self; };
}
