# The uv workspace as Nix data, from each package's pyproject.toml, with builtins only
# (builtins.fromTOML), so it evaluates on Debian's Nix 2.8 as well as on the owner's host.
# flake.nix builds every package from this; tests/appliance checks it against tomllib.
{ root ? ../. }:
let
  members = builtins.attrNames (builtins.readDir (root + "/packages"));
  pyproject = name: builtins.fromTOML (builtins.readFile (root + "/packages/${name}/pyproject.toml"));

  # "httpx>=0.27" -> "httpx"; "typing_extensions" -> "typing-extensions" (nixpkgs' spelling).
  requirementName = requirement:
    let
      name = builtins.head (builtins.match "([A-Za-z0-9._-]+).*" requirement);
    in
    builtins.replaceStrings [ "_" "." "A" "B" "C" "D" "E" "F" "G" "H" "I" "J" "K" "L" "M" "N" "O" "P" "Q" "R" "S" "T" "U" "V" "W" "X" "Y" "Z" ]
      [ "-" "-" "a" "b" "c" "d" "e" "f" "g" "h" "i" "j" "k" "l" "m" "n" "o" "p" "q" "r" "s" "t" "u" "v" "w" "x" "y" "z" ]
      name;

  describe = name:
    let
      project = (pyproject name).project;
      requirements = map requirementName (project.dependencies or [ ]);
    in
    {
      inherit name;
      version = project.version;
      description = project.description or name;
      # Workspace members are built here; everything else comes from nixpkgs' python3Packages.
      workspace = builtins.filter (dep: builtins.elem dep members) requirements;
      pypi = builtins.filter (dep: !(builtins.elem dep members)) requirements;
      scripts = builtins.attrNames (project.scripts or { });
    };
in
{
  inherit members;
  packages = builtins.listToAttrs (map (name: { inherit name; value = describe name; }) members);
}
