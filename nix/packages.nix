# Every workspace package built with nixpkgs' Python tooling, and one OCI image per role, from
# whichever `pkgs` the caller gives: the flake's for `nix build`, the host's for the NixOS module
# (one nixpkgs per system). `members`: the Python packages (for withPackages); `all`: the
# applications and images, flat (the flake's packages output, the module's default).
{ pkgs, workspace }:
let
  lib = pkgs.lib;
  python = pkgs.python3;

  # The packages declare uv_build as their build backend with a version range for uv users;
  # nixpkgs' uv-build need not be in that range, so Nix builds the same src/<name> layout with
  # hatchling, which finds it by the project name and ships non-Python files (roles.json).
  buildMember = name:
    let member = workspace.packages.${name}; in
    python.pkgs.buildPythonPackage {
      pname = name;
      inherit (member) version;
      pyproject = true;
      src = ../packages + "/${name}";
      postPatch = ''
        substituteInPlace pyproject.toml \
          --replace-fail 'requires = ["uv_build>=0.8,<0.14"]' 'requires = ["hatchling"]' \
          --replace-fail 'build-backend = "uv_build"' 'build-backend = "hatchling.build"'
      '';
      build-system = [ python.pkgs.hatchling ];
      dependencies = map (dep: members.${dep}) member.workspace
        ++ map (dep: python.pkgs.${dep}) member.pypi;
      pythonImportsCheck = [ name ];
      meta = {
        inherit (member) description;
        mainProgram = if member.scripts == [ ] then null else builtins.head member.scripts;
      };
    };

  members = lib.genAttrs workspace.members buildMember;
  applications = lib.mapAttrs
    (name: package: if workspace.packages.${name}.scripts == [ ] then package else python.pkgs.toPythonApplication package)
    members;

  stack = import ../nixos-modules/lib.nix { };
  caBundle = "/etc/ssl/certs/ca-bundle.crt"; # where cacert's etc/ lands in an image's root

  # dockerTools writes a docker archive; skopeo turns it into an OCI archive without changing a
  # layer, and the image digest (sha256 of the manifest bytes) is recorded beside it, so the
  # unit can run exactly this image by digest (podman run --pull=never NAME@DIGEST).
  ociImage = { name, contents, config }:
    let
      docker = pkgs.dockerTools.buildLayeredImage {
        name = "boxmaker/${name}";
        tag = "latest";
        inherit contents;
        config = config // {
          # Runs as this user anywhere else; the units map only one id and pass --user=0:0.
          User = "65534:65534";
          # The CA bundle (cacert, in every image): Python's ssl reads SSL_CERT_FILE, nixpkgs'
          # certifi NIX_SSL_CERT_FILE, so gatewayd's https:// and wss:// can verify a server.
          Env = [ "PATH=/bin" "LANG=C.UTF-8" "PYTHONDONTWRITEBYTECODE=1"
                  "SSL_CERT_FILE=${caBundle}" "NIX_SSL_CERT_FILE=${caBundle}" ];
        };
      };
    in
    pkgs.runCommand "boxmaker-image-${name}" {
      nativeBuildInputs = [ pkgs.skopeo ];
      passthru.layered = docker; # what went in (contents, config), for inspection
    } ''
      mkdir -p $out
      skopeo --insecure-policy --tmpdir "$TMPDIR" copy \
        docker-archive:${docker} oci-archive:$out/image.tar:localhost/boxmaker/${name}:latest
      digest="sha256:$(skopeo --insecure-policy --tmpdir "$TMPDIR" inspect --raw \
        oci-archive:$out/image.tar | sha256sum | cut -d' ' -f1)"
      echo "$digest" > $out/digest
      echo "BOXMAKER_IMAGE_DIGEST=$digest" > $out/digest.env
      echo "localhost/boxmaker/${name}" > $out/name
    '';

  # A role's image holds its application and the host programs the manifest gives it (brokerd:
  # podman, as a client of the tool runtime's service).
  roleImage = role: ociImage {
    name = role;
    contents = [ applications.${role} pkgs.cacert ] ++ map (program: pkgs.${program}) (stack.manifest.roles.${role}.programs or [ ]);
    config = { };
  };

  toolkitEnv = python.withPackages (_: [ members.toolkit ]);
  toolkitImage = ociImage {
    name = "toolkit";
    contents = [ toolkitEnv pkgs.busybox pkgs.cacert ];
    config.Entrypoint = [ "${toolkitEnv}/bin/python3" "-P" "-s" "-B" "-m" "toolkit" ];
  };
  images = lib.listToAttrs (map (role: { name = "image-${role}"; value = roleImage role; }) stack.roleNames)
    // { image-toolkit = toolkitImage; };
in
{
  inherit members applications images;
  all = applications // images // { default = applications.bxctl; };
}
