{
  description = "Boxmaker: a sovereign personal agent harness; one digest-named image per role, run by a NixOS module";

  # nixos-25.05, pinned in flake.lock to a revision and its narHash (docs/deploy.md says how
  # they were found). Update with `nix flake update` on a machine that can reach GitHub.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.05";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
      workspace = import ./nix/workspace.nix { root = ./.; };
      stack = import ./nixos-modules/lib.nix { };
    in
    {
      # Builtins only: evaluable without nixpkgs (tests/appliance does, with Nix 2.8).
      lib = {
        inherit (stack) manifest podmanArgs fixedSettings tmpfiles;
        inherit workspace;
      };

      # <role> and bxctl, toolkit, bxcore; image-<role> and image-toolkit (OCI archives whose
      # digest is in $out/digest).
      packages = forAllSystems (pkgs: import ./nix/packages.nix { inherit pkgs workspace; });

      nixosModules.default = import ./nixos-modules/default.nix { inherit self; };

      checks = forAllSystems (pkgs: import ./nix/checks.nix { inherit pkgs self workspace; });

      formatter = forAllSystems (pkgs: pkgs.nixfmt-rfc-style);
    };
}
