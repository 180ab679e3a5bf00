# `nix flake check`: ruff, the import contracts, the test suite (the tests that need neither the
# real llama-server nor a container runtime) and the NixOS VM test.
{ pkgs, self, workspace }:
let
  python = pkgs.python3;
  members = map (name: self.packages.${pkgs.stdenv.hostPlatform.system}.${name}) workspace.members;
  testPython = python.withPackages (ps: members ++ [ ps.pytest ps.hypothesis ps.import-linter ]);
  inSource = name: inputs: script: pkgs.runCommand "boxmaker-${name}" { nativeBuildInputs = inputs; } ''
    cp -r ${self} source && chmod -R u+w source && cd source
    ${script}
    touch $out
  '';
in
{
  ruff = inSource "ruff" [ pkgs.ruff ] "ruff check --no-cache .";
  import-linter = inSource "import-linter" [ testPython ] "lint-imports --no-cache";
  tests = inSource "tests" [ testPython pkgs.systemd ] ''
    export HOME=$TMPDIR HYPOTHESIS_PROFILE=ci
    python3 -m pytest -p no:cacheprovider -m "not real_server and not sandbox" tests
  '';
  vm = import ../nixos-modules/tests/vm.nix { inherit pkgs self; };
}
