# services.boxmaker evaluated by nixpkgs' real module system (`lib.evalModules`), with the NixOS
# options it sets declared as NixOS declares them (./nixos-options.nix) and a `pkgs` that holds
# only what the module asks of it, as inert derivations (./stub-pkgs.nix; nothing is built).
#
#   nix-instantiate --eval --strict --json -E \
#     'import nixos-modules/tests/eval.nix { lib = import <nixpkgs>/lib; host = { ... }; }'
#
# `host`: the owner's configuration, a module. `buildWithPkgs`: leave services.boxmaker.packages
# at its default, which calls ../../nix/packages.nix with this `pkgs` (whose builders remember
# their arguments); otherwise the packages are given, inert. Returns what NixOS would make of
# it: the units, users, groups, tmpfiles rules, /etc entries and packages, the generated config
# file's contents, and the messages of the assertions that fail (NixOS refuses to build a system
# when there are any).
# tests/appliance/test_nixos_module.py runs it with nixpkgs' lib/ on the build machine.
{ lib, host, buildWithPkgs ? false }:
let
  pkgs = import ./stub-pkgs.nix { inherit lib; };
  inherit (pkgs.stub) package program module;

  # The module's own packages (its default builds them from pkgs with nixpkgs' Python tooling,
  # which is not here): the applications, and each image as an OCI archive with its digest.
  roles = (import ../lib.nix { }).roleNames;
  images = lib.genAttrs (roles ++ [ "toolkit" ]) (role: package "boxmaker-image-${role}" { });
  packages = lib.genAttrs (roles ++ [ "bxctl" "toolkit" ]) program // { bxcore = module "bxcore"; };

  evaluated = lib.evalModules {
    modules = [
      ./nixos-options.nix
      ../default.nix
      { _module.args.pkgs = pkgs; }
      (lib.mkIf (!buildWithPkgs) { services.boxmaker = { inherit packages images; }; })
      host
    ];
  };
  config = evaluated.config;
in
{
  inherit (config.systemd) services sockets timers;
  inherit (config.users) users groups;
  # The tmpfiles.d lines NixOS writes from systemd.tmpfiles.settings (tmpfiles.nix,
  # mkRuleFileContent), every file's, then any raw rules.
  tmpfiles = lib.concatLists (lib.mapAttrsToList (_file: paths: lib.concatLists (lib.mapAttrsToList
    (path: entries: lib.mapAttrsToList
      (_: e: "'${e.type}' '${path}' '${e.mode}' '${e.user}' '${e.group}' '${e.age}' ${lib.strings.escapeC [ "\t" "\n" "\r" " " "\\" ] e.argument}")
      entries) paths)) config.systemd.tmpfiles.settings) ++ config.systemd.tmpfiles.rules;
  maintainers = config.meta.maintainers;
  etc = lib.mapAttrs (_: file: { inherit (file) source target mode text; }) config.environment.etc;
  systemPackages = map (p: p.name) config.environment.systemPackages;
  containers = config.virtualisation.containers.enable;
  configFile = config.services.boxmaker.configFile;
  # With buildWithPkgs: what the module's packages were built from.
  built = lib.optionalAttrs buildWithPkgs {
    packages = lib.mapAttrs (_: p: { inherit (p) name; pythonModule = p.pythonModule or null; })
      config.services.boxmaker.packages;
    images = lib.mapAttrs
      (_: image: { contents = map (c: c.name) image.layered.contents; inherit (image.layered) config; })
      config.services.boxmaker.images;
  };
  failedAssertions = map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);
}
