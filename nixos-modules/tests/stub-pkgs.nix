# A stand-in for nixpkgs' `pkgs`, holding only what nixos-modules/default.nix, nix/packages.nix
# and nix/checks.nix use, as inert derivations that remember the arguments they were built
# from (nothing is realised: evaluation only). nixpkgs itself cannot be had on the build
# machine; its lib/ can, and is the `lib` given here. Names that nixpkgs' python3Packages lacks
# (import-linter) are absent here too, so `or` fallbacks are evaluated as on the owner's host.
#
# `pypi`: the names of the workspace's nixpkgs dependencies (nix/workspace.nix's `pypi` lists).
{ lib, pypi ? builtins.concatMap (member: member.pypi)
    (builtins.attrValues (import ../../nix/workspace.nix { }).packages) }:
let
  system = "x86_64-linux";

  # An inert store path that type-checks as a package: never realised. What it was made from
  # is part of it (as JSON), so computing its path evaluates every argument in full: a script
  # that names an undefined attribute or a missing file fails evaluation, as in nixpkgs.
  package = name: extra: builtins.derivation {
    inherit name system;
    builder = "/bin/sh";
    args = [ "-c" "exit 1" ];
    madeFrom = builtins.toJSON extra;
  } // extra;
  program = name: package name { meta.mainProgram = name; };

  # A Python package as buildPythonPackage makes one: `pythonModule` set, which is what
  # python.withPackages keeps (nixpkgs' toPythonApplication sets it to false).
  module = name: package name { pythonModule = true; };

  # nixpkgs' python3Packages: the workspace's dependencies, the test tools, grimp for
  # import-linter, and the builders nix/packages.nix uses.
  tools = [ "pytest" "pytest-timeout" "hypothesis" "uvicorn" "jsonschema" "pyyaml" "click" "grimp" "rich" ];
  pythonPackages = lib.genAttrs (lib.unique (pypi ++ tools)) (name: module "python3-${name}") // {
    hatchling = module "hatchling";
    buildPythonPackage = args: package "${args.pname}-${args.version}" {
      inherit (args) pname;
      meta = args.meta or { };
      dependencies = args.dependencies or [ ];
      src = args.src or null;
      pythonModule = true;
    };
    toPythonApplication = drv: drv // { pythonModule = false; };
  };
in
{
  inherit lib;
  stdenv.hostPlatform.system = system;
  podman = program "podman";
  skopeo = program "skopeo";
  busybox = program "busybox";
  ruff = program "ruff";
  systemd = program "systemd";
  coreutils = program "coreutils";
  findutils = program "findutils";
  gnugrep = program "gnugrep";
  gnused = program "gnused";
  nixfmt-rfc-style = program "nixfmt";
  cacert = package "cacert" { };
  testers.runNixOSTest = args: package "vm-test-run-${args.name}" { };
  fetchurl = args: package (baseNameOf args.url) { inherit (args) url hash; };
  runCommand = name: env: script: package name ((env.passthru or { }) // { inherit env script; });
  dockerTools.buildLayeredImage = args:
    package "docker-image-${lib.replaceStrings [ "/" ] [ "-" ] args.name}" { inherit (args) contents config; };
  python3 = {
    pkgs = pythonPackages;
    # nixpkgs' withPackages silently leaves out what is not a Python module (an application
    # from toPythonApplication); here that is an error, naming it.
    withPackages = select:
      let
        packages = select pythonPackages;
        dropped = lib.filter (p: !(p.pythonModule or false)) packages;
      in
      if dropped != [ ] then
        throw "python3.withPackages would drop ${toString (map (p: p.name) dropped)}: not Python modules (pythonModule = false)"
      else program "python3-env" // { inherit packages; };
  };
  # nixpkgs' pkgs-lib/formats.nix: a TOML value is never null.
  formats.toml = { }: {
    type = with lib.types;
      let valueType = oneOf [ bool int float str path (attrsOf valueType) (listOf valueType) ]
        // { description = "TOML value"; };
      in valueType;
    # The file depends on the value, as nixpkgs' does (a setting changes the config directory).
    generate = name: value: package name { inherit value; };
  };
  stub = { inherit package program module; };
}
