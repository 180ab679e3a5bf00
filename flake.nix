{
  description = "Boxmaker: a sovereign personal agent harness; one digest-named image per role, run by a NixOS module";

  # nixos-26.05, the supported release. flake.lock is written by `nix flake lock` on a machine
  # that can reach GitHub (docs/deploy.md, "nixpkgs pin": the build machine cannot).
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-26.05";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
      workspace = import ./nix/workspace.nix { root = ./.; };
      stack = import ./nixos-modules/lib.nix { };
      boxmakerWith = pkgs: import ./nix/packages.nix { inherit pkgs workspace; };
    in
    {
      # Builtins only: evaluable without nixpkgs (tests/appliance does, with Nix 2.8).
      lib = {
        inherit (stack) manifest podmanArgs fixedSettings tmpfiles;
        inherit workspace;
      };

      # <role> and bxctl, toolkit, bxcore; image-<role> and image-toolkit (OCI archives whose
      # digest is in $out/digest). The NixOS module builds the same from the host's pkgs.
      packages = forAllSystems (pkgs: (boxmakerWith pkgs).all);

      # `boxmaker.{members,applications,images,all}` in any nixpkgs, for hosts that want them
      # as packages of their own.
      overlays.default = final: _prev: { boxmaker = boxmakerWith final; };

      nixosModules.default = import ./nixos-modules/default.nix;

      checks = forAllSystems (pkgs: import ./nix/checks.nix { inherit pkgs self; boxmaker = boxmakerWith pkgs; });

      formatter = forAllSystems (pkgs: pkgs.nixfmt-rfc-style);
    };
}
